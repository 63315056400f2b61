package engine_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/helm-locker/helm-locker/engine"
	"github.com/helm-locker/helm-locker/manifest"
)

// Lock the objects of a YAML file, report each drift, and wait until they
// are all as the file says.
func Example() {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		log.Fatal(err)
	}
	l, err := engine.NewLocker(cfg, engine.Options{FieldManager: "my-operator"})
	if err != nil {
		log.Fatal(err)
	}
	go l.Run(ctx)

	f, err := os.Open("app.yaml")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	objs, err := manifest.Parse(f)
	if err != nil {
		log.Fatal(err)
	}
	set, err := l.Lock(ctx, "my-app", objs,
		engine.DefaultNamespace("apps"),
		engine.Ignore(engine.IgnoreRule{Kind: "Deployment", Paths: []string{"/spec/replicas"}}),
		engine.OnDrift(func(d engine.Drift) {
			fmt.Printf("%s drifted at %v (by %v); corrected: %v\n", d.Ref, d.Paths, d.Managers, d.Corrected)
		}))
	if err != nil {
		log.Fatal(err) // an object the API server would refuse, named
	}
	if err := set.WaitLocked(ctx); err != nil {
		log.Fatal(err)
	}
	diffs, err := set.Diff(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range diffs {
		fmt.Print(d.Text)
	}
}
