package render_test

import (
	"fmt"

	"github.com/helm-locker/helm-locker/internal/render"
	"github.com/helm-locker/helm-locker/manifest"
)

// A release's stored manifest against two renders of its chart now, read
// as Helm 3 stores them: the replica count is the chart's doing, the
// generated token is not.
func ExampleCompare() {
	deployment := func(replicas, token string) string {
		return "---\n# Source: web/templates/deployment.yaml\n" +
			"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: apps\n" +
			"spec:\n  replicas: " + replicas + "\n  template:\n    metadata:\n      annotations:\n        token: " + token + "\n"
	}
	stored := deployment("2", "x7Qp")
	now, again := deployment("3", "Lm2c"), deployment("3", "9fKd")

	changes, err := render.Compare(manifest.Helm3, stored, now, again)
	if err != nil {
		panic(err)
	}
	for _, c := range changes {
		fmt.Println(c.Object, c.Paths)
	}
	// Output:
	// Deployment apps/web [/spec/replicas]
}
