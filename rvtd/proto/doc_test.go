package proto

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the generated sections of docs/rvtd-protocol.md")

const docPath = "../../docs/rvtd-protocol.md"

func renderFields(w *strings.Builder, fields []Field, size int) {
	var fds []string
	fmt.Fprintf(w, "| offset | type | field |\n|---|---|---|\n")
	var tail *Field
	for i, f := range fields {
		switch f.Type {
		case "fd":
			fds = append(fds, f.Name)
		case "[]":
			tail = &fields[i]
		default:
			fmt.Fprintf(w, "| %d | %s | %s |\n", f.Offset, f.Type, f.Name)
		}
	}
	if tail != nil {
		fmt.Fprintf(w, "| %d | tail | `%s`: zero or more elements of %d bytes |\n", tail.Offset, tail.Name, tail.Size)
		if len(tail.Elem) > 1 {
			fmt.Fprintf(w, "\nEach `%s` element:\n\n", tail.Name)
			renderFields(w, tail.Elem, tail.Size)
		}
	}
	if len(fds) > 0 {
		fmt.Fprintf(w, "\nDescriptors, in this order: %s.\n", "`"+strings.Join(fds, "`, `")+"`")
	}
}

func renderBody(w *strings.Builder, what string, b Body) {
	fields, size := Layout(b)
	if len(fields) == 0 {
		fmt.Fprintf(w, "%s: empty.\n\n", what)
		return
	}
	fmt.Fprintf(w, "%s, %d bytes:\n\n", what, size)
	renderFields(w, fields, size)
	w.WriteString("\n")
}

func renderMessages(cm bool) string {
	var w strings.Builder
	title := "### Message table"
	if cm {
		title = "### rdma_cm message table"
	}
	w.WriteString(title + "\n\n| opcode | name | handle | request | reply | what |\n|---|---|---|---|---|---|\n")
	size := func(b Body) string {
		fields, n := Layout(b)
		if len(fields) == 0 {
			return "empty"
		}
		s := fmt.Sprint(n)
		for _, f := range fields {
			if f.Type == "[]" {
				s += fmt.Sprintf(" + %d×n", f.Size)
			}
		}
		return s
	}
	for _, s := range Specs() {
		if IsCM(s.Op) != cm {
			continue
		}
		req, rep := "-", size(s.body(FlagReply))
		if !s.Event {
			req = size(s.body(0))
		} else {
			rep += " (event)"
		}
		h := s.Handle
		if h == "" {
			h = "-"
		}
		fmt.Fprintf(&w, "| 0x%04x | `%s` | %s | %s | %s | %s |\n", uint16(s.Op), s.Name, h, req, rep, s.Doc)
	}
	w.WriteString("\n")
	for _, s := range Specs() {
		if IsCM(s.Op) != cm {
			continue
		}
		fmt.Fprintf(&w, "### `%s` (0x%04x)\n\n%s.", s.Name, uint16(s.Op), s.Doc)
		if s.Handle != "" {
			fmt.Fprintf(&w, " Header handle: %s.", s.Handle)
		}
		w.WriteString("\n\n")
		if s.Event {
			renderBody(&w, "Event body", s.body(FlagEvent))
			continue
		}
		renderBody(&w, "Request body", s.body(0))
		renderBody(&w, "Reply body", s.body(FlagReply))
	}
	return w.String()
}

func renderRecords(cm bool) string {
	var w strings.Builder
	for _, r := range Records() {
		if strings.HasPrefix(r.Name, "cm_") != cm {
			continue
		}
		fields, size := Layout(r.Body)
		fmt.Fprintf(&w, "#### `%s` record, %d bytes\n\n", r.Name, size)
		renderFields(&w, fields, size)
		w.WriteString("\n")
	}
	return w.String()
}

func replaceSection(doc, name, body string) (string, error) {
	begin := "<!-- BEGIN GENERATED: " + name + " (rvtd/proto) -->\n"
	end := "<!-- END GENERATED: " + name + " -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("markers for %s not found", name)
	}
	return doc[:i+len(begin)] + body + doc[j:], nil
}

// TestDocLayouts checks that the layouts in docs/rvtd-protocol.md are the
// ones the table encodes; -update rewrites them.
func TestDocLayouts(t *testing.T) {
	raw, err := os.ReadFile(docPath)
	require.NoError(t, err)
	doc := string(raw)
	want, err := replaceSection(doc, "messages", renderMessages(false))
	require.NoError(t, err)
	want, err = replaceSection(want, "records", renderRecords(false))
	require.NoError(t, err)
	want, err = replaceSection(want, "cm_messages", renderMessages(true))
	require.NoError(t, err)
	want, err = replaceSection(want, "cm_records", renderRecords(true))
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(docPath, []byte(want), 0o644))
		return
	}
	require.Equal(t, want, doc, "docs/rvtd-protocol.md is stale: go test ./rvtd/proto -run TestDocLayouts -update")
}
