package cli

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cosmicac/cosmicac/internal/appnode"
	"github.com/cosmicac/cosmicac/internal/config"
	"github.com/cosmicac/cosmicac/internal/httpserve"
	"github.com/cosmicac/cosmicac/internal/inferproxy"
	"github.com/cosmicac/cosmicac/internal/monitor"
	"github.com/cosmicac/cosmicac/internal/ork"
	"github.com/cosmicac/cosmicac/internal/simcluster"
)

// The sections below are the components' Go configs as their --config files
// write them. The components keep time.Duration, which encoding/json (and so
// sigs.k8s.io/yaml) reads as nanoseconds; each section embeds the component's
// config and shadows every time.Duration field with a config.Duration of the
// same JSON name (encoding/json takes the shallower field), so a file writes
// durations as "30s" or "1m30s". toConfig puts them back: read the section's
// durations only through it (a method promoted from the embedded config
// would see the shadowed field). TestFileConfigsWriteDurationsAsStrings
// fails when a time.Duration is left visible.

// orkSection is ork.Config (untagged: its JSON names are the Go names, which
// a file may write in camelCase).
type orkSection struct {
	ork.Config
	Heartbeat     config.Duration
	WorkerTimeout config.Duration
}

func orkSectionOf(c ork.Config) orkSection {
	return orkSection{Config: c, Heartbeat: config.Duration(c.Heartbeat), WorkerTimeout: config.Duration(c.WorkerTimeout)}
}

func (s orkSection) toConfig() ork.Config {
	c := s.Config
	c.Heartbeat, c.WorkerTimeout = s.Heartbeat.D(), s.WorkerTimeout.D()
	return c
}

// appNodeSection is appnode.Config (its yaml tags are not read:
// sigs.k8s.io/yaml goes through encoding/json, so its JSON names are the Go
// names).
type appNodeSection struct {
	appnode.Config
	OrkTimeout    config.Duration
	ShutdownGrace config.Duration
}

func appNodeSectionOf(c appnode.Config) appNodeSection {
	return appNodeSection{Config: c, OrkTimeout: config.Duration(c.OrkTimeout), ShutdownGrace: config.Duration(c.ShutdownGrace)}
}

func (s appNodeSection) toConfig() appnode.Config {
	c := s.Config
	c.OrkTimeout, c.ShutdownGrace = s.OrkTimeout.D(), s.ShutdownGrace.D()
	return c
}

// simSection is simcluster.Config.
type simSection struct {
	simcluster.Config
	Step config.Duration `json:"step"`
}

func simSectionOf(c simcluster.Config) simSection {
	return simSection{Config: c, Step: config.Duration(c.Step)}
}

func (s simSection) toConfig() simcluster.Config {
	c := s.Config
	c.Step = s.Step.D()
	return c
}

// monitorSection is monitor.Config.
type monitorSection struct {
	monitor.Config
	JobIdle      config.Duration `json:"jobIdle"`
	WriteTimeout config.Duration `json:"writeTimeout"`
	Heartbeat    config.Duration `json:"heartbeat"`
	Loki         lokiSection     `json:"loki"`
}

// lokiSection is monitor.LokiConfig.
type lokiSection struct {
	monitor.LokiConfig
	BatchWait   config.Duration `json:"batchWait"`
	MinBackoff  config.Duration `json:"minBackoff"`
	MaxBackoff  config.Duration `json:"maxBackoff"`
	Timeout     config.Duration `json:"timeout"`
	MaxLookback config.Duration `json:"maxLookback"`
}

func monitorSectionOf(c monitor.Config) monitorSection {
	l := c.Loki
	return monitorSection{Config: c,
		JobIdle: config.Duration(c.JobIdle), WriteTimeout: config.Duration(c.WriteTimeout), Heartbeat: config.Duration(c.Heartbeat),
		Loki: lokiSection{LokiConfig: l,
			BatchWait: config.Duration(l.BatchWait), MinBackoff: config.Duration(l.MinBackoff), MaxBackoff: config.Duration(l.MaxBackoff),
			Timeout: config.Duration(l.Timeout), MaxLookback: config.Duration(l.MaxLookback)},
	}
}

func (s monitorSection) toConfig() monitor.Config {
	c := s.Config
	c.JobIdle, c.WriteTimeout, c.Heartbeat = s.JobIdle.D(), s.WriteTimeout.D(), s.Heartbeat.D()
	l := s.Loki
	c.Loki = l.LokiConfig
	c.Loki.BatchWait, c.Loki.MinBackoff, c.Loki.MaxBackoff = l.BatchWait.D(), l.MinBackoff.D(), l.MaxBackoff.D()
	c.Loki.Timeout, c.Loki.MaxLookback = l.Timeout.D(), l.MaxLookback.D()
	return c
}

// proxySection is inferproxy.Config (untagged, like ork.Config).
type proxySection struct {
	inferproxy.Config
	CatalogTTL    config.Duration
	LookupTTL     config.Duration
	KeyTTL        config.Duration
	DownFor       config.Duration
	SlowFirstByte config.Duration
}

func (s proxySection) toConfig() inferproxy.Config {
	c := s.Config
	c.CatalogTTL, c.LookupTTL, c.KeyTTL = s.CatalogTTL.D(), s.LookupTTL.D(), s.KeyTTL.D()
	c.DownFor, c.SlowFirstByte = s.DownFor.D(), s.SlowFirstByte.D()
	return c
}

// httpSection is httpserve.Limits, the http section of every component's
// file: the limits of its HTTP servers (its API or HTTP listener and its
// metrics listener). A field left out takes httpserve.DefaultLimits'.
type httpSection struct {
	Header         config.Duration `json:"header,omitempty"`
	Body           config.Duration `json:"body,omitempty"`
	Upload         config.Duration `json:"upload,omitempty"`
	Write          config.Duration `json:"write,omitempty"`
	Idle           config.Duration `json:"idle,omitempty"`
	MaxHeaderBytes int             `json:"maxHeaderBytes,omitempty"`
}

// UnmarshalJSON refuses unknown fields (as the file's strict reading does
// outside) and negative limits.
func (s *httpSection) UnmarshalJSON(b []byte) error {
	type plain httpSection
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode((*plain)(s)); err != nil {
		return fmt.Errorf("http: %w", err)
	}
	return s.toLimits().Validate()
}

func (s httpSection) toLimits() httpserve.Limits {
	return httpserve.Limits{Header: s.Header.D(), Body: s.Body.D(), Upload: s.Upload.D(), Write: s.Write.D(),
		Idle: s.Idle.D(), MaxHeaderBytes: s.MaxHeaderBytes}
}
