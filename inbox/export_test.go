package inbox

// WithClock replaces the clock, for retention tests.
var WithClock = withClock
