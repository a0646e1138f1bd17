// A DBOS Go application on the current github.com/dbos-inc/dbos-transact-golang release (the pin is in
// go.mod and go.sum), whose conductor client is no longer in the open module: it never connects to Relay.
// Relay manages it through its system database alone (tests/integration/test_dataplane_current_sdks.py).
//
// It mirrors tests/integration/ts_current_app/app.mjs. Configuration comes from the environment:
//
//	APP_NAME             the DBOS application name
//	SYSTEM_DATABASE_URL  postgresql://... (the system database)
//	APP_VERSION          optional application version
//	CONTROL_PORT         port of the loopback control server below (0: any free port)
//
// After Launch it prints one line `READY {"executor_id", "app_version", "control_port", "dbos_version"}` and
// serves, on 127.0.0.1 only: POST /start {workflow, args, workflowId?, queueName?} -> {workflowId},
// POST /open {label} (opens a gate), GET /status/{id} -> {status} (as the app's own SDK reads it) and
// GET /seen -> {seen: [{event, workflow_id, ...}]} (what the workflows recorded as they really ran).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

const (
	sdkModule    = "github.com/dbos-inc/dbos-transact-golang"
	queueName    = "go_queue"
	gatePoll     = 200 * time.Millisecond // one gate step's wait: the SDK checks for cancellation between steps
	gateMaxPolls = 1500                   // five minutes, then the gate gives up (a test never waits that long)
)

var (
	mu     sync.Mutex
	seen   = []map[string]any{}
	opened = map[string]bool{}
)

func record(ctx dbos.Context, event string, fields map[string]any) {
	entry := map[string]any{"event": event, "workflow_id": nil}
	if id, err := dbos.GetWorkflowID(ctx); err == nil {
		entry["workflow_id"] = id
	}
	for k, v := range fields {
		entry[k] = v
	}
	mu.Lock()
	seen = append(seen, entry)
	mu.Unlock()
	line, _ := json.Marshal(entry)
	fmt.Printf("SEEN %s\n", line)
}

func isOpen(label string) bool {
	mu.Lock()
	defer mu.Unlock()
	return opened[label]
}

func greet(ctx dbos.Context, name string) (string, error) {
	loud, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) {
		return strings.ToUpper("hello " + name), nil
	}, dbos.WithStepName("shout"))
	if err != nil {
		return "", err
	}
	result, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) { return loud + "!", nil },
		dbos.WithStepName("exclaim"))
	if err == nil {
		record(ctx, "greet", map[string]any{"result": result})
	}
	return result, err
}

// gate waits, one short step at a time, until the test opens the gate `label` (POST /open).
func gate(ctx dbos.Context, label string) (result string, err error) {
	record(ctx, "gate-started", map[string]any{"label": label})
	defer func() {
		if err != nil {
			record(ctx, "gate-stopped", map[string]any{"label": label, "reason": err.Error()})
		}
	}()
	if _, err = dbos.RunAsStep(ctx, func(context.Context) (string, error) { return "prepared " + label, nil },
		dbos.WithStepName("prepare")); err != nil {
		return "", err
	}
	for i := 0; i < gateMaxPolls; i++ {
		open, err := dbos.RunAsStep(ctx, func(step context.Context) (bool, error) {
			if isOpen(label) {
				return true, nil
			}
			select {
			case <-time.After(gatePoll):
			case <-step.Done():
			}
			return isOpen(label), nil
		}, dbos.WithStepName("poll"))
		if err != nil {
			return "", err
		}
		if open {
			break
		}
	}
	result, err = dbos.RunAsStep(ctx, func(context.Context) (string, error) { return label + ":opened", nil },
		dbos.WithStepName("finish"))
	if err == nil {
		record(ctx, "gate-finished", map[string]any{"label": label})
	}
	return result, err
}

var workflows = map[string]dbos.Workflow[string, string]{"greet": greet, "gate": gate}

func reply(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
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
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
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
	mux.HandleFunc("POST /open", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Label string `json:"label"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			reply(w, 400, map[string]string{"error": err.Error()})
			return
		}
		mu.Lock()
		opened[body.Label] = true
		mu.Unlock()
		reply(w, 200, map[string]string{"opened": body.Label})
	})
	mux.HandleFunc("GET /status/{id}", func(w http.ResponseWriter, r *http.Request) {
		handle, err := dbos.RetrieveWorkflow[string](ctx, r.PathValue("id"))
		if err != nil {
			reply(w, 200, map[string]any{"status": nil})
			return
		}
		status, err := handle.GetStatus()
		if err != nil {
			reply(w, 500, map[string]string{"error": err.Error()})
			return
		}
		reply(w, 200, map[string]any{"status": status.Status})
	})
	mux.HandleFunc("GET /seen", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		reply(w, 200, map[string]any{"seen": append([]map[string]any{}, seen...)})
	})
	return mux
}

// sdkVersion is the release of the SDK module this binary was built with.
func sdkVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == sdkModule {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func run() error {
	ctx, err := dbos.NewContext(context.Background(), dbos.Config{
		AppName:            os.Getenv("APP_NAME"),
		DatabaseURL:        os.Getenv("SYSTEM_DATABASE_URL"),
		ApplicationVersion: os.Getenv("APP_VERSION"),
	}) // no conductor: this release's conductor client is not in the open module
	if err != nil {
		return fmt.Errorf("new context: %w", err)
	}
	defer func() { _ = dbos.Shutdown(ctx, 5*time.Second) }()
	for name, fn := range workflows {
		dbos.RegisterWorkflow(ctx, fn, dbos.WithWorkflowName(name))
	}
	if err := dbos.Launch(ctx); err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	queue, err := dbos.RegisterQueue(ctx, queueName, dbos.WithWorkerConcurrency(2),
		dbos.WithQueueOnConflict(dbos.QueueConflictAlwaysUpdate))
	if err != nil {
		return fmt.Errorf("register queue: %w", err)
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
		"dbos_version": sdkVersion(),
	})
	fmt.Printf("READY %s\n", ready)

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return server.Shutdown(shutdown)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "FAILED", err)
		os.Exit(1)
	}
}
