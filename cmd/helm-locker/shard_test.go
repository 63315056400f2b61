package main

import (
	"context"
	"strings"
	"testing"
)

// TestServedFlags: the shard flags are checked before anything starts, and
// a bad value is an error naming its flag.
func TestServedFlags(t *testing.T) {
	tests := []struct {
		name         string
		opts         options
		wantSelector string
		wantLease    string
		wantErr      string
	}{
		{name: "defaults serve every CR under the controller's Lease", opts: options{controllerName: "helm-locker", webhookService: "helm-locker-webhook"}, wantLease: "helm-locker"},
		{name: "a shard", opts: options{controllerName: "helm-locker", watchSelector: "sharding.helm-locker.io/shard=a", leaseName: "helm-locker-a", webhookService: "helm-locker-webhook-a"},
			wantSelector: "sharding.helm-locker.io/shard=a", wantLease: "helm-locker-a"},
		{name: "a set-based selector", opts: options{controllerName: "helm-locker", watchSelector: "sharding.helm-locker.io/shard in (a,b)", webhookService: "helm-locker-webhook"},
			wantSelector: "sharding.helm-locker.io/shard in (a,b)", wantLease: "helm-locker"},
		{name: "a selector that does not parse", opts: options{controllerName: "helm-locker", watchSelector: "shard==a==b", webhookService: "helm-locker-webhook"}, wantErr: `--watch-label-selector "shard==a==b"`},
		{name: "a label value that is not one", opts: options{controllerName: "helm-locker", watchSelector: "shard=a/b", webhookService: "helm-locker-webhook"}, wantErr: "--watch-label-selector"},
		{name: "a Lease name that is not one", opts: options{controllerName: "helm-locker", leaseName: "Shard_A", webhookService: "helm-locker-webhook"}, wantErr: `--leader-elect-lease-name "Shard_A"`},
		{name: "a Service name that is not one", opts: options{controllerName: "helm-locker", webhookService: "webhook.a"}, wantErr: `--webhook-service "webhook.a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			selector, err := tt.opts.served()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("served() = %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := selector.String(); got != tt.wantSelector {
				t.Errorf("selector %q, want %q", got, tt.wantSelector)
			}
			if got := tt.opts.lease(); got != tt.wantLease {
				t.Errorf("lease %q, want %q", got, tt.wantLease)
			}
		})
	}
}

// TestBadSelectorStopsStartup: the operator exits with the flag named
// before it reads a kubeconfig.
func TestBadSelectorStopsStartup(t *testing.T) {
	root := newRootCommand()
	root.SetArgs([]string{"--watch-label-selector", "shard=a b", "--kubeconfig", "/nonexistent"})
	err := root.ExecuteContext(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "--watch-label-selector") {
		t.Fatalf("startup with a bad selector: %v, want an error naming --watch-label-selector", err)
	}
}
