package inferagent

// ParseGauges is parseGauges, for the tests.
var ParseGauges = parseGauges
