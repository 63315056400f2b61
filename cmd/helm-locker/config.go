package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// envPrefix makes --namespace settable as HELM_LOCKER_NAMESPACE.
const envPrefix = "HELM_LOCKER"

// bindConfig lets every flag of cmd be set, in falling order of precedence,
// on the command line, in the environment or in the --config file. Values
// from the environment and the file are written back into the flags, so the
// rest of the program reads flags only and never asks viper.
func bindConfig(cmd *cobra.Command, configFile string) error {
	v := viper.New()
	v.SetEnvPrefix(envPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if configFile != "" {
		v.SetConfigFile(configFile)
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("reading config file %s: %w", configFile, err)
		}
	}
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || !v.IsSet(f.Name) {
			return
		}
		if err := cmd.Flags().Set(f.Name, v.GetString(f.Name)); err != nil {
			errs = append(errs, fmt.Errorf("setting --%s from environment or config file: %w", f.Name, err))
		}
	})
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
