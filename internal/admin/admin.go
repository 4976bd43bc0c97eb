// Package admin holds one-off maintenance operations on a coalesce stream,
// such as clearing the duplicates out of a job queue flooded before its
// producers went through coalesce.
package admin

import "errors"

// Sentinel errors; match with errors.Is.
var (
	ErrInvalidOptions = errors.New("admin: invalid options")
	ErrJetStream      = errors.New("admin: jetstream request failed")
)
