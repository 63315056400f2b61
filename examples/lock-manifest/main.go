// Command lock-manifest is an example operator: it locks the objects of a
// YAML file with helm-locker's engine and prints one JSON line per event,
// until it is interrupted. The objects stay when it stops.
//
//	lock-manifest --kubeconfig ~/.kube/config -f app.yaml -n apps
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/manifest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "lock-manifest:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file")
	file := flag.String("f", "", "YAML or JSON file of the objects to lock")
	namespace := flag.String("n", "default", "namespace of objects that name none")
	name := flag.String("name", "example", "name of the locked set")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A config from clientcmd sets no rate limit, and NewLocker leaves
	// pacing to the API server's priority and fairness. Set cfg.QPS and
	// cfg.Burst to throttle the locker on the client instead.
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	l, err := engine.NewLocker(cfg, engine.Options{FieldManager: "lock-manifest"})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()

	f, err := os.Open(*file)
	if err != nil {
		return err
	}
	objs, err := manifest.Parse(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	out := json.NewEncoder(os.Stdout)
	set, err := l.Lock(ctx, *name, objs, engine.DefaultNamespace(*namespace),
		engine.OnDrift(func(d engine.Drift) {
			_ = out.Encode(map[string]any{"event": "drift", "object": d.Ref.String(), "paths": d.Paths,
				"managers": d.Managers, "corrected": d.Corrected, "deleted": d.Deleted})
		}))
	if err != nil {
		return err
	}
	// An object the API server refuses for good (a NotLockedError) does
	// not stop the lock: the others stay held, and the refused one is
	// tried again once a minute. Say so, and keep running.
	err = set.WaitLocked(ctx)
	var notLocked *engine.NotLockedError
	switch {
	case errors.As(err, &notLocked):
		_ = out.Encode(map[string]any{"event": "notLocked", "error": err.Error()})
	case err != nil:
		return err
	default:
		res, _ := set.Result()
		_ = out.Encode(map[string]any{"event": "locked", "objects": res.Objects})
	}
	<-done
	return nil
}
