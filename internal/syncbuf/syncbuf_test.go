package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestConcurrent: writers and a reader at once (run with -race); every
// write is there at the end.
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
			}
		}()
	}
	for i := 0; i < 100; i++ {
		_ = b.String() // reads beside the writes
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 400 || !strings.Contains(b.String(), "w3-99\n") {
		t.Fatalf("%d lines, want 400:\n%s", n, b.String())
	}
}
