package controlplane

import (
	"net"
	"testing"
)

// TestFreeAddress: the ports handed out are below the kernel's ephemeral
// range, which outgoing connections draw from, never the same twice, and
// free: each can be bound.
func TestFreeAddress(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		addr, err := FreeAddress()
		if err != nil {
			t.Fatal(err)
		}
		if addr.Port < 20000 || addr.Port >= 32000 || seen[addr.Port] {
			t.Fatalf("FreeAddress gave port %d: want one from 20000 to 32000 not given before", addr.Port)
		}
		seen[addr.Port] = true
		ln, err := net.Listen("tcp", addr.String())
		if err != nil {
			t.Fatalf("the address FreeAddress gave cannot be bound: %v", err)
		}
		_ = ln.Close()
	}
}
