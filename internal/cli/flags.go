package cli

import (
	"fmt"
	"slices"
	"strconv"

	ucli "github.com/urfave/cli/v3"

	"github.com/outboxkit/outbox/internal/config"
)

// envHint names an environment variable in --help without reading it:
// config.Load reads the OUTBOX_* variables itself, in the same pass and with
// the same parser as the file, so that flag > environment > file holds and
// errors name the variable. urfave/cli shows a flag's variables by asking its
// sources for EnvValueSource; this one always reports "not found".
type envHint string

func (e envHint) Lookup() (string, bool) { return "", false }
func (e envHint) IsFromEnv() bool        { return true }
func (e envHint) Key() string            { return string(e) }
func (e envHint) String() string         { return fmt.Sprintf("environment variable %q", string(e)) }
func (e envHint) GoString() string       { return fmt.Sprintf("envHint(%q)", string(e)) }

// configFlag is --config: the YAML file. Unlike the settings, its variable
// is read by urfave/cli, since it must be known before the file is.
func configFlag() ucli.Flag {
	return &ucli.StringFlag{
		Name:      "config",
		Usage:     "read settings from the YAML `FILE` (flags and OUTBOX_* variables win over it)",
		Sources:   ucli.EnvVars(config.EnvPrefix + "CONFIG"),
		TakesFile: true,
	}
}

// settingFlags returns the flags of the settings with the given keys, in
// config.Settings order; no keys means every setting.
func settingFlags(keys ...string) []ucli.Flag {
	var flags []ucli.Flag
	for _, s := range config.Settings() {
		if len(keys) > 0 && !slices.Contains(keys, s.Key) {
			continue
		}
		src := ucli.NewValueSourceChain(envHint(s.Env))
		if s.Bool {
			flags = append(flags, &ucli.BoolFlag{Name: s.Flag, Usage: s.Usage, Sources: src})
			continue
		}
		flags = append(flags, &ucli.StringFlag{Name: s.Flag, Usage: s.Usage, Sources: src, DefaultText: s.Default})
	}
	return flags
}

// loadConfig builds the config of cmd: the defaults, the --config file, the
// OUTBOX_* variables, then the flags given on the command line. It does not
// validate. Every error is a usage error.
func loadConfig(cmd *ucli.Command) (*config.Config, error) {
	c, err := config.Load(cmd.String("config"))
	if err != nil {
		return nil, usage(err)
	}
	for _, s := range config.Settings() {
		if !cmd.IsSet(s.Flag) {
			continue
		}
		v := cmd.String(s.Flag)
		if s.Bool {
			v = strconv.FormatBool(cmd.Bool(s.Flag))
		}
		if err := c.Set(s.Key, v); err != nil {
			return nil, usage(fmt.Errorf("--%s: %w", s.Flag, err))
		}
	}
	return c, nil
}
