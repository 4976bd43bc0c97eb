package chaos

// EventRecord is what the load generator logs for one event it sent.
type EventRecord struct {
	Seq      int64  `json:"seq"`
	EID      string `json:"eid"` // unique id, carried in the event's args
	Type     string `json:"type"`
	Tenant   string `json:"tenant"`
	ID       int    `json:"id"` // the item the accumulate policy collects (args.id)
	Producer int    `json:"producer"`
	Sent     int64  `json:"sent"` // unix ns, before the request was written
	Done     int64  `json:"done"` // unix ns, after the answer (or error) was read
	Status   int    `json:"status"`
	// The decision, when Status is 200.
	Outcome string `json:"outcome,omitempty"`
	Key     string `json:"key,omitempty"`
	Round   string `json:"round,omitempty"`
	DueAt   int64  `json:"due_at,omitempty"` // unix ms
	Events  int    `json:"events,omitempty"`
	Err     string `json:"err,omitempty"`
}

// Accepted reports whether the event got a decision (HTTP 200).
func (e *EventRecord) Accepted() bool { return e.Status == 200 }

// JobStart is what a worker logs as a job's handler starts, which is after
// the worker closed (released) the job's round.
type JobStart struct {
	At       int64  `json:"at"` // unix ns at handler entry
	Worker   string `json:"w"`
	PID      int    `json:"pid"`
	Type     string `json:"type"`
	Key      string `json:"key"`
	Round    string `json:"round"` // "" for a bypassed job
	Release  string `json:"release"`
	Attempt  int    `json:"attempt"`
	Version  int    `json:"version"`
	Events   int    `json:"events"` // the round summary's event count
	Items    int    `json:"items"`
	OpenedAt int64  `json:"opened_at"` // unix ms
	DueAt    int64  `json:"due_at"`    // unix ms, 0 for an immediate job
	EID      string `json:"eid"`       // eid in the job's args (the opening event's; the event's when bypassed)
	// ItemList: the summary's items (accumulate: the ids, canonical JSON).
	ItemList []string `json:"item_list,omitempty"`
	// PayloadEID: the eid in the summary's payload (payload last).
	PayloadEID string `json:"payload_eid,omitempty"`
	// End, unix ns, is set on a job's second line, written as its handler
	// returns (a job whose worker was killed has none): the same record
	// otherwise, so the two pair up.
	End int64 `json:"end,omitempty"`
}

// Resubmission is a producer's log line saying that events it answered
// locally found their round gone at the flush and were submitted again
// (debounce.ResubmittedMessage): the round they had joined counts fewer
// events than the decisions carrying it, and the key's next round more.
type Resubmission struct {
	At     int64  // unix ns
	Type   string `json:"job_type"`
	Key    string `json:"key"`
	Round  string `json:"token"`
	Events int    `json:"events"`
}
