// A DBOS Java application for Relay's integration tests: an unmodified executor of dev.dbos:transact (the pin
// is in pom.xml; its conductor client, dev.dbos.transact.conductor.Conductor, is MIT) connected to Relay as its
// conductor.
//
// It mirrors tests/integration/ts_app/app.mjs so the same harness drives both. Configuration comes from the
// environment:
//
//   APP_NAME             the DBOS application name (the {appName} of /websocket/{appName}/{key})
//   CONDUCTOR_URL        Relay's ws://host:port;  CONDUCTOR_KEY: the API key Relay issued
//   SYSTEM_DATABASE_URL  postgresql://user[:password]@host:port/db[?query] (turned into a JDBC URL, user and
//                        password; the Java SDK only supports PostgreSQL), or a jdbc:postgresql:// URL as is
//   APP_VERSION          optional application version
//   CONTROL_PORT         port of the loopback control server below (0: any free port)
//   JAVA_APP_LOG_LEVEL   optional slf4j-simple level (info by default; debug shows the SDK's pings and frames)
//
// After DBOS.launch() it prints one line `READY {"executor_id", "app_version", "control_port"}` and serves, on
// 127.0.0.1 only, the control API the tests drive the application with (what a real app's own endpoints would
// do): POST /start {workflow, args, workflowId?, queueName?} -> {workflowId},
// POST /send {destination, message, topic?}, POST /flags {failing}, GET /result/{workflowId}, GET /alerts.
// Every alert Relay delivers is also printed as one line `ALERT {"name", "message", "metadata"}`.
// SIGTERM (or SIGINT) shuts DBOS down and exits 0.
package relay.javaapp;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.dbos.transact.DBOS;
import dev.dbos.transact.StartWorkflowOptions;
import dev.dbos.transact.config.DBOSConfig;
import dev.dbos.transact.workflow.QueueConflictResolution;
import dev.dbos.transact.workflow.QueueOptions;
import dev.dbos.transact.workflow.Workflow;
import dev.dbos.transact.workflow.WorkflowClassName;
import dev.dbos.transact.workflow.WorkflowHandle;
import dev.dbos.transact.workflow.WorkflowSchedule;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;
import tools.jackson.databind.JsonNode;
import tools.jackson.databind.json.JsonMapper;

public final class App {
  static final String QUEUE_NAME = "java_queue";
  static final String SCHEDULE_NAME = "java_yearly";
  // Once a year at midnight on January 1st: it never fires during a test; tests trigger and backfill it.
  // The SDK parses crons with cron-utils' SPRING53 definition, which needs 6 fields (seconds first): the other
  // apps' "0 0 1 1 *" is refused ("Cron expression contains 5 parts but we expect one of [6]").
  static final String SCHEDULE_CRON = "0 0 0 1 1 *";
  // The workflows' class name as stored in the system database (and shown in schedules), stable whatever the
  // Java class is called.
  static final String WORKFLOW_CLASS = "RelayJavaApp";

  static final JsonMapper JSON = JsonMapper.builder().build();

  // Read by the `fragile` step: a test makes workflows fail, then "fixes" them and forks from the failure.
  static final AtomicBoolean FAILING = new AtomicBoolean(false);

  static final List<Map<String, Object>> ALERTS = new ArrayList<>();

  /** The workflows, called through the proxy DBOS returns (which makes them durable). */
  public interface Workflows {
    String greet(String name);

    String gate(String tag);

    String chatty(String label);

    String flaky(String label);

    String parent(String name);

    // A scheduled workflow's signature must be exactly (Instant, Object).
    void tick(Instant scheduledAt, Object context);
  }

  @WorkflowClassName(WORKFLOW_CLASS)
  public static final class WorkflowsImpl implements Workflows {
    private final DBOS dbos;
    private Workflows self; // the proxy, to start a child workflow durably

    WorkflowsImpl(DBOS dbos) {
      this.dbos = dbos;
    }

    void setSelf(Workflows self) {
      this.self = self;
    }

    @Override
    @Workflow(name = "greet")
    public String greet(String name) {
      String loud = dbos.runStep(() -> ("hello " + name).toUpperCase(), "shout");
      return dbos.runStep(() -> loud + "!", "exclaim");
    }

    // Waits for a message on topic "go": a workflow that stays PENDING until the test lets it go.
    @Override
    @Workflow(name = "gate")
    // Each step body prints `STEP name tag` when it really runs (not when replayed from the system database):
    // the recovery tests count these lines across executors.
    public String gate(String tag) {
      dbos.runStep(() -> ranStep("prepare", tag, "prepared " + tag), "prepare");
      Object message = dbos.recv("go", Duration.ofSeconds(120)).orElse(null);
      return dbos.runStep(() -> ranStep("finish", tag, tag + ":" + message), "finish");
    }

    // Events, a stream and a notification, all read back through Relay.
    @Override
    @Workflow(name = "chatty")
    public String chatty(String label) {
      dbos.setEvent("progress", "started " + label);
      dbos.writeStream("log", "line-1");
      dbos.writeStream("log", "line-2");
      dbos.closeStream("log");
      Object ping = dbos.recv("ping", Duration.ofSeconds(120)).orElse(null);
      dbos.setEvent("progress", "done " + label);
      return label + " got " + ping;
    }

    @Override
    @Workflow(name = "flaky")
    public String flaky(String label) {
      dbos.runStep(() -> "first " + label, "first");
      return dbos.runStep(
          () -> {
            if (FAILING.get()) {
              throw new IllegalStateException("fragile step failed for " + label);
            }
            return "recovered " + label;
          },
          "fragile");
    }

    @Override
    @Workflow(name = "parent")
    public String parent(String name) {
      WorkflowHandle<String, RuntimeException> handle = dbos.startWorkflow(() -> self.greet(name));
      String childResult = handle.getResult();
      return "parent of " + childResult;
    }

    @Override
    @Workflow(name = "tick")
    public void tick(Instant scheduledAt, Object context) {
      dbos.runStep(() -> "tick at " + scheduledAt + " (" + JSON.writeValueAsString(context) + ")", "tick_step");
    }
  }

  private final DBOS dbos;
  private final Workflows workflows;
  private HttpServer server;
  private ExecutorService serverThreads;

  App(DBOS dbos, Workflows workflows) {
    this.dbos = dbos;
    this.workflows = workflows;
  }

  // ------------------------------------------------------------------------------------ configuration

  /** {url, user, password} for the SDK from SYSTEM_DATABASE_URL. */
  static String[] jdbcSettings(String url) {
    if (url == null || url.isBlank()) {
      throw new IllegalArgumentException("SYSTEM_DATABASE_URL is not set");
    }
    if (url.startsWith("jdbc:")) {
      String user = Objects.requireNonNullElse(System.getenv("PGUSER"), "postgres");
      String password = Objects.requireNonNullElse(System.getenv("PGPASSWORD"), "");
      return new String[] {url, user, password};
    }
    URI uri = URI.create(url);
    if (!"postgresql".equals(uri.getScheme()) && !"postgres".equals(uri.getScheme())) {
      throw new IllegalArgumentException("SYSTEM_DATABASE_URL must be a postgresql:// URL");
    }
    String user = "postgres";
    String password = "";
    String userInfo = uri.getRawUserInfo();
    if (userInfo != null && !userInfo.isEmpty()) {
      int colon = userInfo.indexOf(':');
      user = decode(colon < 0 ? userInfo : userInfo.substring(0, colon));
      if (colon >= 0) {
        password = decode(userInfo.substring(colon + 1));
      }
    }
    String host = uri.getHost() != null ? uri.getHost() : "localhost";
    int port = uri.getPort() > 0 ? uri.getPort() : 5432;
    String database = uri.getRawPath() == null ? "" : uri.getRawPath().replaceFirst("^/", "");
    if (database.isEmpty()) {
      database = "postgres";
    }
    StringBuilder jdbc = new StringBuilder("jdbc:postgresql://").append(host).append(':').append(port);
    jdbc.append('/').append(database);
    if (uri.getRawQuery() != null && !uri.getRawQuery().isEmpty()) {
      jdbc.append('?').append(uri.getRawQuery());
    }
    return new String[] {jdbc.toString(), user, password};
  }

  private static String decode(String s) {
    return URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8);
  }

  private static String env(String name) {
    String value = System.getenv(name);
    return value == null || value.isBlank() ? null : value;
  }

  // ------------------------------------------------------------------------------------ control server

  private void control(HttpExchange exchange) throws IOException {
    try {
      String method = exchange.getRequestMethod();
      String path = exchange.getRequestURI().getRawPath();
      if ("POST".equals(method) && "/start".equals(path)) {
        JsonNode body = readBody(exchange);
        String workflow = text(body, "workflow");
        List<Object> args = new ArrayList<>();
        if (body.has("args") && body.get("args").isArray()) {
          for (JsonNode arg : body.get("args")) {
            args.add(JSON.treeToValue(arg, Object.class));
          }
        }
        StartWorkflowOptions options = new StartWorkflowOptions();
        if (text(body, "workflowId") != null) {
          options = options.withWorkflowId(text(body, "workflowId"));
        }
        if (text(body, "queueName") != null) {
          options = options.withQueue(text(body, "queueName"));
        }
        String arg = args.isEmpty() || args.get(0) == null ? null : String.valueOf(args.get(0));
        WorkflowHandle<?, ?> handle;
        switch (workflow == null ? "" : workflow) {
          case "greet" -> handle = dbos.startWorkflow(() -> workflows.greet(arg), options);
          case "gate" -> handle = dbos.startWorkflow(() -> workflows.gate(arg), options);
          case "chatty" -> handle = dbos.startWorkflow(() -> workflows.chatty(arg), options);
          case "flaky" -> handle = dbos.startWorkflow(() -> workflows.flaky(arg), options);
          case "parent" -> handle = dbos.startWorkflow(() -> workflows.parent(arg), options);
          default -> {
            reply(exchange, 404, Map.of("error", "no workflow " + workflow));
            return;
          }
        }
        reply(exchange, 200, Map.of("workflowId", handle.workflowId()));
        return;
      }
      if ("POST".equals(method) && "/send".equals(path)) {
        JsonNode body = readBody(exchange);
        Object message = body.has("message") ? JSON.treeToValue(body.get("message"), Object.class) : null;
        dbos.send(text(body, "destination"), message, text(body, "topic"));
        reply(exchange, 200, Map.of("sent", true));
        return;
      }
      if ("POST".equals(method) && "/flags".equals(path)) {
        JsonNode body = readBody(exchange);
        if (body.has("failing") && body.get("failing").isBoolean()) {
          FAILING.set(body.get("failing").booleanValue());
        }
        reply(exchange, 200, Map.of("failing", FAILING.get()));
        return;
      }
      if ("GET".equals(method) && path.startsWith("/result/")) {
        String id = URLDecoder.decode(path.substring("/result/".length()), StandardCharsets.UTF_8);
        Map<String, Object> result = new LinkedHashMap<>();
        var status = dbos.getWorkflowStatus(id);
        result.put("status", status.map(s -> s.status() == null ? null : s.status().name()).orElse(null));
        result.put("output", status.map(s -> s.output()).orElse(null));
        reply(exchange, 200, result);
        return;
      }
      if ("GET".equals(method) && "/alerts".equals(path)) {
        List<Map<String, Object>> copy;
        synchronized (ALERTS) {
          copy = new ArrayList<>(ALERTS);
        }
        reply(exchange, 200, copy);
        return;
      }
      reply(exchange, 404, Map.of("error", "no such route"));
    } catch (Exception e) {
      reply(exchange, 500, Map.of("error", String.valueOf(e.getMessage() != null ? e.getMessage() : e)));
    } finally {
      exchange.close();
    }
  }

  private static String text(JsonNode body, String field) {
    JsonNode node = body.get(field);
    return node == null || node.isNull() ? null : node.asString();
  }

  private static JsonNode readBody(HttpExchange exchange) throws IOException {
    try (InputStream in = exchange.getRequestBody()) {
      byte[] data = in.readAllBytes();
      return data.length == 0 ? JSON.createObjectNode() : JSON.readTree(data);
    }
  }

  private static void reply(HttpExchange exchange, int status, Object body) throws IOException {
    byte[] data = JSON.writeValueAsBytes(body);
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(status, data.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(data);
    }
  }

  int serve(int port) throws IOException {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 0);
    serverThreads = Executors.newCachedThreadPool();
    server.setExecutor(serverThreads);
    server.createContext("/", this::control);
    server.start();
    return server.getAddress().getPort();
  }

  void stop() {
    if (server != null) {
      server.stop(0);
      serverThreads.shutdownNow();
    }
    dbos.shutdown();
  }

  // ------------------------------------------------------------------------------------ main

  /** The executor's id and application version: DBOS 1.1.0-m6 has no public accessor for either. */
  private static String[] executorIdentity(DBOS dbos) throws ReflectiveOperationException {
    Method getter = DBOS.class.getDeclaredMethod("getDbosExecutor");
    getter.setAccessible(true);
    Object executor = getter.invoke(dbos);
    String executorId = (String) executor.getClass().getMethod("executorId").invoke(executor);
    String appVersion = (String) executor.getClass().getMethod("appVersion").invoke(executor);
    return new String[] {executorId, appVersion};
  }

  public static void main(String[] argv) {
    try {
      run();
    } catch (Throwable e) {
      // DBOS may have started non-daemon threads by now: exit explicitly, non-zero.
      System.err.println("FAILED " + e);
      e.printStackTrace();
      System.exit(1);
    }
  }

  private static void run() throws Exception {
    // The SDK logs its socket URL, which holds the key (at info once connected, at debug on every attempt):
    // everything written to stdout/stderr goes through a stream that masks it.
    String key = env("CONDUCTOR_KEY");
    if (key != null) {
      System.setOut(new RedactingPrintStream(System.out, key));
      System.setErr(new RedactingPrintStream(System.err, key));
    }
    // slf4j-simple reads these when the first logger is made: before anything touches DBOS.
    System.setProperty(
        "org.slf4j.simpleLogger.defaultLogLevel",
        Objects.requireNonNullElse(env("JAVA_APP_LOG_LEVEL"), "info"));
    System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
    System.setProperty("org.slf4j.simpleLogger.dateTimeFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX");

    String appName = env("APP_NAME");
    if (appName == null) {
      throw new IllegalArgumentException("APP_NAME is not set");
    }
    String[] db = jdbcSettings(System.getenv("SYSTEM_DATABASE_URL"));
    DBOSConfig config =
        DBOSConfig.defaults(appName).withDatabaseUrl(db[0]).withDbUser(db[1]).withDbPassword(db[2]);
    if (env("APP_VERSION") != null) {
      config = config.withAppVersion(env("APP_VERSION"));
    }
    if (key != null) {
      // The SDK uses a custom domain as given (one trailing slash dropped) and appends
      // /websocket/{appName}/{key}: ws://127.0.0.1:PORT becomes ws://127.0.0.1:PORT/websocket/APP/KEY.
      config = config.withConductorKey(key);
      if (env("CONDUCTOR_URL") != null) {
        config = config.withConductorDomain(env("CONDUCTOR_URL"));
      }
      Map<String, Object> metadata = new LinkedHashMap<>();
      metadata.put("runtime", "java");
      metadata.put("java_version", System.getProperty("java.version"));
      metadata.put("pid", ProcessHandle.current().pid());
      config = config.withConductorExecutorMetadata(metadata);
    }

    DBOS dbos = new DBOS(config);
    WorkflowsImpl impl = new WorkflowsImpl(dbos);
    Workflows workflows = dbos.registerProxy(Workflows.class, impl);
    impl.setSelf(workflows);
    dbos.registerAlertHandler(
        (name, message, metadata) -> {
          Map<String, Object> alert = new LinkedHashMap<>();
          alert.put("name", name);
          alert.put("message", message);
          alert.put("metadata", metadata);
          synchronized (ALERTS) {
            ALERTS.add(alert);
          }
          printLine("ALERT " + JSON.writeValueAsString(alert));
        });

    dbos.launch();

    // Database-backed queue and schedule: both only after launch. Two executors of one app may share the
    // database, so a second registration of either must be harmless. (Only database-backed queues are listed
    // by the conductor's list_queues: a queue registered before launch would not show.)
    dbos.registerQueue(
        QUEUE_NAME, QueueOptions.setWorkerConcurrency(2), QueueConflictResolution.ALWAYS_UPDATE);
    if (dbos.getSchedule(SCHEDULE_NAME).isEmpty()) {
      try {
        dbos.createSchedule(
            new WorkflowSchedule(SCHEDULE_NAME, "tick", WORKFLOW_CLASS, SCHEDULE_CRON)
                .withContext(Map.of("owner", "relay-tests")));
      } catch (RuntimeException e) {
        if (dbos.getSchedule(SCHEDULE_NAME).isEmpty()) {
          throw e; // not another executor of the app winning the race
        }
      }
    }

    App app = new App(dbos, workflows);
    String controlPort = Objects.requireNonNullElse(env("CONTROL_PORT"), "0");
    int port = app.serve(Integer.parseInt(controlPort.trim()));

    String[] identity = executorIdentity(dbos);
    Map<String, Object> ready = new LinkedHashMap<>();
    ready.put("executor_id", identity[0]);
    ready.put("app_version", identity[1]);
    ready.put("control_port", port);

    CountDownLatch stopped = new CountDownLatch(1);
    AtomicBoolean stopping = new AtomicBoolean(false);
    // SIGTERM/SIGINT: shut DBOS down and exit 0 (the JVM's default would exit 143/130 through shutdown hooks).
    for (String signal : new String[] {"TERM", "INT"}) {
      sun.misc.Signal.handle(
          new sun.misc.Signal(signal),
          s -> {
            if (stopping.compareAndSet(false, true)) {
              try {
                app.stop();
              } finally {
                stopped.countDown();
              }
            }
          });
    }

    printLine("READY " + JSON.writeValueAsString(ready));
    stopped.await();
    System.exit(0);
  }

  /**
   * A PrintStream that replaces one secret with a mask in whatever text is printed through it. The println
   * overloads of a PrintStream subclass go through print, so masking print covers them too.
   */
  static final class RedactingPrintStream extends PrintStream {
    private final String secret;

    RedactingPrintStream(PrintStream out, String secret) {
      super(out, true, StandardCharsets.UTF_8);
      this.secret = secret;
    }

    private String mask(String s) {
      return s == null ? null : s.replace(secret, "<conductor key>");
    }

    @Override
    public void print(String s) {
      super.print(mask(s));
    }

    @Override
    public void print(Object o) {
      super.print(mask(String.valueOf(o)));
    }

  }

  static String ranStep(String name, String tag, String result) {
    printLine("STEP " + name + " " + tag);
    return result;
  }

  private static void printLine(String line) {
    PrintStream out = System.out;
    synchronized (out) {
      out.println(line);
      out.flush();
    }
  }
}
