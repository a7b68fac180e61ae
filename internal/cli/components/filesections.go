package components

// A component's --config file is its Go config as JSON names it (YAML in
// camelCase): the sections (ork, api, rack, monitor, proxy, http) are the
// components' own Config structs (ork.Config, appnode.Config, …), whose
// durations are config.Duration, written "30s". One struct per component
// carries a setting from the file, the flag and the code alike; the
// round-trip test (TestComponentFilesRoundTrip) fails on a time.Duration
// left in one of them.
