package task

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQueueFIFOAcrossGrowth(t *testing.T) {
	var q queue
	tasks := make([]*Task, 100)
	for i := range tasks {
		tasks[i] = &Task{}
	}
	next := 0 // next index expected from pop
	pushed := 0
	// Interleave pushes and pops so the ring wraps before it grows.
	for pushed < len(tasks) {
		for range 3 {
			if pushed < len(tasks) {
				q.push(tasks[pushed])
				pushed++
			}
		}
		require.Same(t, tasks[next], q.pop())
		next++
	}
	for q.len() > 0 {
		require.Same(t, tasks[next], q.pop())
		next++
	}
	require.Equal(t, len(tasks), next)
	require.Nil(t, q.pop())
}
