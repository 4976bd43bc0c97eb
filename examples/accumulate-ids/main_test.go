package main

import (
	"context"
	"strings"
	"testing"
)

// TestExample runs the example on in-process servers: run fails unless each
// job carries exactly the expected product ids, at the expected time, and no
// other job arrives.
func TestExample(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	err := run(context.Background(), "", "", &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "fired when it reached 100 products") {
		t.Error("no job fired when its round was full")
	}
}

func TestSpan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ids  []int
		want string
	}{
		{nil, ""},
		{[]int{5}, "5"},
		{[]int{1, 2, 3}, "1..3"},
		{[]int{7, 9, 10, 11, 12, 20}, "7 9..12 20"},
	} {
		if got := span(tc.ids); got != tc.want {
			t.Errorf("span(%v) = %q, want %q", tc.ids, got, tc.want)
		}
	}
}
