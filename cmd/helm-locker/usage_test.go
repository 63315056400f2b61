package main

import (
	"strings"
	"testing"

	"github.com/helm-locker/helm-locker/internal/sandbox"
)

// TestExitStatus holds every subcommand to the exit statuses its help
// promises: a command called wrongly exits 2, with the error and a
// pointer to its help, before it reads anything; so does every error of
// diff, whose 1 means "differs"; any other failure exits 1. None of these
// calls reaches a cluster.
func TestExitStatus(t *testing.T) {
	missing := "--kubeconfig=" + t.TempDir() + "/none"
	tests := []struct {
		args []string
		code int
		// stderr is what main prints, in part.
		stderr string
	}{
		{[]string{"--bogus"}, 2, "unknown flag: --bogus\nSee 'helm-locker --help' for usage."},
		{[]string{"bogus"}, 2, `unknown command "bogus" for "helm-locker"`},
		{[]string{"--workers=many"}, 2, `invalid argument "many" for "--workers"`},
		{[]string{"--v=loud"}, 2, `invalid argument "loud" for "-v, --v"`},
		{[]string{"--log-format=xml"}, 2, `--log-format="xml": want text or json`},
		{[]string{"--default-rerender=Always"}, 2, `--default-rerender "Always": want Off, Report or Upgrade`},
		{[]string{"--watch-label-selector=a=b=c"}, 2, "--watch-label-selector"},
		{[]string{"--webhook-url=http://127.0.0.1:9443/validate"}, 2, "--webhook-url"},
		{[]string{"--config=" + t.TempDir() + "/none.yaml"}, 2, "reading config file"},
		{[]string{"--render-timeout=0s"}, 2, "--render-timeout 0s: want more than 0"},
		{[]string{"--rerender-upgrade-interval=0s"}, 2, "--rerender-upgrade-interval 0s: want more than 0"},
		{[]string{"--rerender-upgrade-max-per-hour=0"}, 2, "--rerender-upgrade-max-per-hour 0: want at least 1"},
		{[]string{"--render-memory-limit=lots"}, 2, `invalid argument "lots" for "--render-memory-limit" flag: want a size such as 256Mi`},
		{[]string{"--render-memory-limit=16Mi"}, 2, "--render-memory-limit 16Mi: want at least 64Mi"},
		{[]string{sandbox.Subcommand, "extra"}, 2, `unknown command "extra" for "helm-locker render-sandbox"`},

		{[]string{"version", "--bogus"}, 2, "unknown flag: --bogus\nSee 'helm-locker version --help' for usage."},
		{[]string{"version", "extra"}, 2, `unknown command "extra" for "helm-locker version"`},

		{[]string{"inspect", "--bogus"}, 2, "See 'helm-locker inspect --help' for usage."},
		{[]string{"inspect", "release"}, 2, `want "inspect release NAME", got "release"`},
		{[]string{"inspect", "release", "web", "--revision=last"}, 2, `invalid argument "last" for "--revision"`},
		{[]string{"inspect", "release", "web", "-o", "xml"}, 2, "-o xml: want yaml, json or manifest"},
		{[]string{"inspect", "release", "web", missing}, 1, "loading kubeconfig"},

		{[]string{"diff", "--bogus"}, 2, "unknown flag: --bogus\nSee 'helm-locker diff --help' for usage."},
		{[]string{"diff", "-f", "app.yaml", "--helm=5"}, 2, `invalid argument "5" for "--helm" flag: want 3 or 4`},
		{[]string{"lock", "-f", "app.yaml", "--helm", "v4"}, 2, `invalid argument "v4" for "--helm" flag: want 3 or 4`},
		{[]string{"diff"}, 2, "name either helmrelease/NAME, manifestlock/NAME or -f FILE, or --rerender RELEASE"},
		{[]string{"diff", "a", "b"}, 2, "accepts at most 1 arg(s), received 2"},
		{[]string{"diff", "helmrelease/web", "-f", "app.yaml"}, 2, "name either"},
		{[]string{"diff", "web"}, 2, "web: want helmrelease/NAME or manifestlock/NAME; to render the Helm release web again, --rerender web"},
		{[]string{"diff", "deployment/web"}, 2, "deployment/web: want helmrelease/NAME or manifestlock/NAME"},
		{[]string{"diff", "helmrelease/web", "--color=rainbow"}, 2, "--color rainbow: want auto, always or never"},
		{[]string{"diff", "--rerender=maybe", "web"}, 2, `invalid argument "maybe" for "--rerender"`},
		{[]string{"diff", "--rerender"}, 2, "--rerender needs a release"},
		{[]string{"diff", "--rerender", "-f", "app.yaml"}, 2, "it takes no -f"},
		{[]string{"diff", "--rerender", "-n", "apps", "web", "other"}, 2, "accepts at most 1 arg(s), received 2"},
		{[]string{"diff", "--rerender", "manifestlock/web"}, 2, "a ManifestLock has no chart to render again"},
		{[]string{"diff", "--rerender", "web", missing}, 2, "loading kubeconfig"},
		{[]string{"diff", "helmrelease/web", missing}, 2, "loading kubeconfig"},

		{[]string{"lock", "--bogus"}, 2, "See 'helm-locker lock --help' for usage."},
		{[]string{"lock"}, 2, "name the files to lock with -f"},
		{[]string{"lock", "extra", "-f", "app.yaml"}, 2, `unknown command "extra" for "helm-locker lock"`},
		{[]string{"lock", "-f", "app.yaml", "--timeout=soon"}, 2, `invalid argument "soon" for "--timeout"`},
		{[]string{"lock", "-f", "app.yaml", "-o", "xml"}, 2, "-o xml: want yaml or json"},
		{[]string{"lock", "-f", "app.yaml", "--warn", "--prevent"}, 2, "--warn and --prevent ask for opposite modes"},
		{[]string{"lock", "-f", "-"}, 2, "name the lock with --name"},
		{[]string{"lock", "-f", "app.yaml", missing}, 1, "loading kubeconfig"},

		{[]string{"completion", "bash", "extra"}, 2, "See 'helm-locker completion bash --help' for usage."},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			root := newRootCommand()
			var out strings.Builder
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs(tt.args)
			err := root.ExecuteContext(t.Context())
			if err == nil {
				t.Fatalf("succeeded, want exit %d; output:\n%s", tt.code, out.String())
			}
			code, print := exitCode(err)
			if code != tt.code || !print || !strings.Contains(err.Error(), tt.stderr) {
				t.Errorf("exit %d, printed %v, error:\n%v\nwant exit %d, printed, with %q", code, print, err, tt.code, tt.stderr)
			}
		})
	}
}

// TestHelpExitsZero: asking for help is no usage error.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"diff", "--help"}, {"help", "lock"}, {"inspect", "-h"}} {
		root := newRootCommand()
		var out strings.Builder
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.ExecuteContext(t.Context()); err != nil || out.Len() == 0 {
			t.Errorf("%v: %v, printed %d bytes", args, err, out.Len())
		}
	}
}
