package controller

import (
	"strings"
	"testing"
)

func TestJoinMessages(t *testing.T) {
	long := strings.Repeat("x", 600)
	tests := []struct {
		name      string
		msgs      []string
		want      string // the whole message, or its start when wantLen is set
		wantLen   int
		wantAfter string // the end of the message
	}{
		{name: "one", msgs: []string{"ConfigMap a/b at /data/key"}, want: "ConfigMap a/b at /data/key"},
		{name: "several", msgs: []string{"ConfigMap a/b at /data/key", "ConfigMap a/c was deleted"}, want: "2 objects: ConfigMap a/b at /data/key; ConfigMap a/c was deleted"},
		{name: "too many to list", msgs: []string{long, long, long}, want: "3 objects: " + long, wantAfter: " (and 2 more)"},
		{name: "one too long", msgs: []string{strings.Repeat("y", 2000)}, wantLen: maxEventMessage, want: "yyy", wantAfter: "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := joinMessages(tt.msgs)
			switch {
			case tt.wantAfter == "" && got != tt.want:
				t.Errorf("joinMessages = %q, want %q", got, tt.want)
			case tt.wantAfter != "" && (!strings.HasPrefix(got, tt.want) || !strings.HasSuffix(got, tt.wantAfter)):
				t.Errorf("joinMessages = %q, want %q … %q", got, tt.want[:min(40, len(tt.want))], tt.wantAfter)
			}
			if len(got) > maxEventMessage {
				t.Errorf("message of %d bytes, want at most %d", len(got), maxEventMessage)
			}
			if tt.wantLen != 0 && len(got) != tt.wantLen {
				t.Errorf("message of %d bytes, want %d", len(got), tt.wantLen)
			}
		})
	}
}
