// A DBOS Go application for Relay's integration tests: an unmodified executor of
// github.com/dbos-inc/dbos-transact-golang (the pin is in go.mod; it is the newest release whose conductor
// client is still in the MIT module) connected to Relay as its conductor.
//
// It mirrors tests/integration/ts_app/app.mjs so the same harness drives both. Configuration comes from the
// environment:
//
//	APP_NAME             the DBOS application name (the {appName} of /websocket/{appName}/{key})
//	CONDUCTOR_URL        Relay's ws://host:port;  CONDUCTOR_KEY: the API key Relay issued
//	SYSTEM_DATABASE_URL  postgresql://... or sqlite:/path/to.db (the system database)
//	APP_VERSION          optional application version
//	CONTROL_PORT         port of the loopback control server below (0: any free port)
//
// After Launch it prints one line `READY {"executor_id", "app_version", "control_port"}` and serves, on
// 127.0.0.1 only, the control API the tests drive the application with (what a real app's own endpoints
// would do): POST /start {workflow, args, workflowId?, queueName?} -> {workflowId},
// POST /send {destination, message, topic?}, POST /flags {failing}, GET /result/{workflowId}, GET /alerts.
// Every alert Relay delivers is also printed as one line `ALERT {"name", "message", "metadata"}`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	// The SDK's SQLite system-database driver: needed for sqlite: URLs.
	_ "github.com/dbos-inc/dbos-transact-golang/dbos/driver/sqlite"
)

const (
	queueName    = "go_queue"
	scheduleName = "go_yearly"
)

// failing is read by the `fragile` step: a test makes workflows fail, then "fixes" them and forks.
var failing atomic.Bool

type alert struct {
	Name     string            `json:"name"`
	Message  string            `json:"message"`
	Metadata map[string]string `json:"metadata"`
}

var (
	alertsMu sync.Mutex
	alerts   []alert
)

func greet(ctx dbos.Context, name string) (string, error) {
	loud, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		return strings.ToUpper("hello " + name), nil
	}, dbos.WithStepName("shout"))
	if err != nil {
		return "", err
	}
	return dbos.RunAsStep(ctx, func(context.Context) (string, error) { return loud + "!", nil },
		dbos.WithStepName("exclaim"))
}

// gate waits for a message on topic "go": a workflow that stays PENDING until the test lets it go.
// Each step body prints `STEP name tag` when it really runs (not when replayed from the system database): the
// recovery tests count these lines across executors.
func gate(ctx dbos.Context, tag string) (string, error) {
	if _, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		return ranStep("prepare", tag, "prepared "+tag), nil
	}, dbos.WithStepName("prepare")); err != nil {
		return "", err
	}
	message, err := dbos.Recv[string](ctx, "go", 120*time.Second)
	if err != nil {
		return "", err
	}
	return dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		return ranStep("finish", tag, tag+":"+message), nil
	}, dbos.WithStepName("finish"))
}

func ranStep(name, tag, result string) string {
	fmt.Printf("STEP %s %s\n", name, tag)
	return result
}

// chatty leaves events, a stream and a notification behind, all read back through Relay.
func chatty(ctx dbos.Context, label string) (string, error) {
	if err := dbos.SetEvent(ctx, "progress", "started "+label); err != nil {
		return "", err
	}
	for _, line := range []string{"line-1", "line-2"} {
		if err := dbos.WriteStream(ctx, "log", line); err != nil {
			return "", err
		}
	}
	if err := dbos.CloseStream(ctx, "log"); err != nil {
		return "", err
	}
	ping, err := dbos.Recv[string](ctx, "ping", 120*time.Second)
	if err != nil {
		return "", err
	}
	if err := dbos.SetEvent(ctx, "progress", "done "+label); err != nil {
		return "", err
	}
	return label + " got " + ping, nil
}

func flaky(ctx dbos.Context, label string) (string, error) {
	if _, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) { return "first " + label, nil },
		dbos.WithStepName("first")); err != nil {
		return "", err
	}
	return dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		if failing.Load() {
			return "", fmt.Errorf("fragile step failed for %s", label)
		}
		return "recovered " + label, nil
	}, dbos.WithStepName("fragile"), dbos.WithStepMaxRetries(0))
}

func parent(ctx dbos.Context, name string) (string, error) {
	handle, err := dbos.RunWorkflow(ctx, greet, name)
	if err != nil {
		return "", err
	}
	child, err := handle.GetResult()
	if err != nil {
		return "", err
	}
	return "parent of " + child, nil
}

func tick(ctx dbos.Context, input dbos.ScheduledWorkflowInput) (any, error) {
	return dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		return fmt.Sprintf("tick at %s", input.ScheduledTime.UTC().Format(time.RFC3339)), nil
	}, dbos.WithStepName("tick_step"))
}

type workflowFn = dbos.Workflow[string, string]

var workflows = map[string]workflowFn{
	"greet": greet, "gate": gate, "chatty": chatty, "flaky": flaky, "parent": parent,
}

func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func decode(r *http.Request, into any) error {
	defer r.Body.Close()
	return json.NewDecoder(r.Body).Decode(into)
}

func controlMux(ctx dbos.Context, queue dbos.Queue) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Workflow   string   `json:"workflow"`
			Args       []string `json:"args"`
			WorkflowID string   `json:"workflowId"`
			QueueName  string   `json:"queueName"`
		}
		if err := decode(r, &body); err != nil {
			reply(w, 400, map[string]string{"error": err.Error()})
			return
		}
		fn, ok := workflows[body.Workflow]
		if !ok {
			reply(w, 404, map[string]string{"error": "no workflow " + body.Workflow})
			return
		}
		var opts []dbos.WorkflowOption
		if body.WorkflowID != "" {
			opts = append(opts, dbos.WithWorkflowID(body.WorkflowID))
		}
		if body.QueueName != "" {
			if body.QueueName != queueName {
				reply(w, 404, map[string]string{"error": "no queue " + body.QueueName})
				return
			}
			opts = append(opts, dbos.WithQueue(queue))
		}
		arg := ""
		if len(body.Args) > 0 {
			arg = body.Args[0]
		}
		handle, err := dbos.RunWorkflow(ctx, fn, arg, opts...)
		if err != nil {
			reply(w, 500, map[string]string{"error": err.Error()})
			return
		}
		reply(w, 200, map[string]string{"workflowId": handle.GetWorkflowID()})
	})
	mux.HandleFunc("POST /send", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Destination string `json:"destination"`
			Message     string `json:"message"`
			Topic       string `json:"topic"`
		}
		if err := decode(r, &body); err != nil {
			reply(w, 400, map[string]string{"error": err.Error()})
			return
		}
		if err := dbos.Send(ctx, body.Destination, body.Message, body.Topic); err != nil {
			reply(w, 500, map[string]string{"error": err.Error()})
			return
		}
		reply(w, 200, map[string]bool{"sent": true})
	})
	mux.HandleFunc("POST /flags", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Failing *bool `json:"failing"`
		}
		if err := decode(r, &body); err != nil {
			reply(w, 400, map[string]string{"error": err.Error()})
			return
		}
		if body.Failing != nil {
			failing.Store(*body.Failing)
		}
		reply(w, 200, map[string]bool{"failing": failing.Load()})
	})
	mux.HandleFunc("GET /result/{id}", func(w http.ResponseWriter, r *http.Request) {
		handle, err := dbos.RetrieveWorkflow[string](ctx, r.PathValue("id"))
		if err != nil {
			reply(w, 200, map[string]any{"status": nil, "output": nil})
			return
		}
		status, err := handle.GetStatus()
		if err != nil {
			reply(w, 500, map[string]string{"error": err.Error()})
			return
		}
		reply(w, 200, map[string]any{"status": status.Status, "output": status.Output})
	})
	mux.HandleFunc("GET /alerts", func(w http.ResponseWriter, _ *http.Request) {
		alertsMu.Lock()
		defer alertsMu.Unlock()
		reply(w, 200, append([]alert{}, alerts...))
	})
	return mux
}

func run() error {
	config := dbos.Config{
		AppName:                   os.Getenv("APP_NAME"),
		DatabaseURL:               os.Getenv("SYSTEM_DATABASE_URL"),
		ConductorURL:              os.Getenv("CONDUCTOR_URL"),
		ConductorAPIKey:           os.Getenv("CONDUCTOR_KEY"),
		ApplicationVersion:        os.Getenv("APP_VERSION"),
		ConductorExecutorMetadata: map[string]any{"runtime": "go", "pid": os.Getpid()},
	}
	ctx, err := dbos.NewContext(context.Background(), config)
	if err != nil {
		return fmt.Errorf("new context: %w", err)
	}
	defer func() { _ = dbos.Shutdown(ctx, 10*time.Second) }()

	for name, fn := range workflows {
		dbos.RegisterWorkflow(ctx, fn, dbos.WithWorkflowName(name))
	}
	dbos.RegisterWorkflow(ctx, tick, dbos.WithWorkflowName("tick"))
	dbos.SetAlertHandler(ctx, func(name, message string, metadata map[string]string) {
		a := alert{Name: name, Message: message, Metadata: metadata}
		alertsMu.Lock()
		alerts = append(alerts, a)
		alertsMu.Unlock()
		line, _ := json.Marshal(a)
		fmt.Printf("ALERT %s\n", line)
	})
	if err := dbos.Launch(ctx); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	// Database-backed queue and schedule; two executors of one app share the database, so a second
	// registration of either must be harmless.
	queue, err := dbos.RegisterQueue(ctx, queueName, dbos.WithWorkerConcurrency(2),
		dbos.WithQueueOnConflict(dbos.QueueConflictAlwaysUpdate))
	if err != nil {
		return fmt.Errorf("register queue: %w", err)
	}
	if _, err := dbos.GetSchedule(ctx, scheduleName); err != nil {
		// Once a year at midnight on January 1st (the Go SDK's cron has a seconds field): it never fires during
		// a test; tests trigger and backfill it.
		err = dbos.CreateSchedule(ctx, dbos.ScheduleSpec{
			ScheduleName: scheduleName, Schedule: "0 0 0 1 1 *", WorkflowName: "tick",
			Context: map[string]string{"owner": "relay-tests"},
		})
		if err != nil && !strings.Contains(strings.ToLower(err.Error()), "exist") {
			return fmt.Errorf("create schedule: %w", err)
		}
	}

	port, _ := strconv.Atoi(os.Getenv("CONTROL_PORT"))
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return fmt.Errorf("control port: %w", err)
	}
	server := &http.Server{Handler: controlMux(ctx, queue), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()

	ready, _ := json.Marshal(map[string]any{
		"executor_id":  dbos.GetExecutorID(ctx),
		"app_version":  dbos.GetApplicationVersion(ctx),
		"control_port": listener.Addr().(*net.TCPAddr).Port,
	})
	fmt.Printf("READY %s\n", ready)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := server.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAILED", err)
		os.Exit(1)
	}
}
