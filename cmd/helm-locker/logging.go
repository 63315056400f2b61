package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// setupLogging picks the log format. Text is klog's own; JSON goes through
// log/slog, one object per line, with V(n) logs kept up to --v.
func setupLogging(format, verbosity string) error {
	switch format {
	case "text", "":
		return nil
	case "json":
		v, err := strconv.Atoi(verbosity)
		if err != nil {
			return fmt.Errorf("--v=%q: %w", verbosity, err)
		}
		handler := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.Level(-v)})
		klog.SetLogger(logr.FromSlogHandler(handler))
		return nil
	default:
		return fmt.Errorf("--log-format=%q: want text or json", format)
	}
}
