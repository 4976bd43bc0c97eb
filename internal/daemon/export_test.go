package daemon

// EventFrom is the NATS ingest decoder, for the fuzz target.
var EventFrom = eventFrom
