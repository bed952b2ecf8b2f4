package kafkapub

// Classify exposes classify to the tests.
var Classify = classify
