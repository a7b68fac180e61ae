package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration that a config file writes as a string that
// time.ParseDuration reads ("30s", "1m30s", "250ms"). A bare number is
// refused: it would be nanoseconds, which nobody means.
//
// It is also a flag.Value (and a pflag.Value), so a flag can set it
// directly.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is the Go duration string, e.g. "1m30s".
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a string, e.g. "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string. null leaves d as it is.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	var s string
	if len(b) == 0 || b[0] != '"' || json.Unmarshal(b, &s) != nil {
		return fmt.Errorf("duration %s: write a string with a unit, e.g. \"30s\" or \"1m30s\"", b)
	}
	return d.Set(s)
}

// Set parses s with time.ParseDuration.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a number with a unit, e.g. \"30s\" or \"1m30s\"", s)
	}
	*d = Duration(v)
	return nil
}

// Type names the flag's value in usage messages.
func (d *Duration) Type() string { return "duration" }
