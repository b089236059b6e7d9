package ring

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docTable returns the (offset, type, field) rows of the table under the
// heading in docs/rvtd-protocol.md.
func docTable(t *testing.T, heading string) [][3]string {
	raw, err := os.ReadFile("../../docs/rvtd-protocol.md")
	require.NoError(t, err)
	doc := string(raw)
	i := strings.Index(doc, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, heading)
	row := regexp.MustCompile(`^\| (\d+) \| (u8|u16|u32|u64) \| ([a-z_ /]+) \|`)
	var rows [][3]string
	started := false
	for _, l := range strings.Split(doc[i+len(heading)+2:], "\n") {
		if strings.HasPrefix(l, "|") {
			started = true
			if m := row.FindStringSubmatch(l); m != nil {
				rows = append(rows, [3]string{m[1], m[2], strings.TrimSpace(m[3])})
			}
		} else if started {
			break
		}
	}
	require.NotEmpty(t, rows, heading)
	return rows
}

// TestRecordsMatchDoc sets each field the document lists through the view
// and checks that exactly the bytes the document gives it change.
func TestRecordsMatchDoc(t *testing.T) {
	type setter func(b []byte)
	for _, tc := range []struct {
		heading string
		size    int
		set     map[string]setter
	}{
		{"### Send WQE record", SendHeaderSize, map[string]setter{
			"wr_id":                      func(b []byte) { SendWQE(b).SetWRID(^uint64(0)) },
			"send_flags":                 func(b []byte) { SendWQE(b).SetSendFlags(^uint32(0)) },
			"opcode":                     func(b []byte) { SendWQE(b).SetOpcode(0xff) },
			"num_sge":                    func(b []byte) { SendWQE(b).SetNumSGE(0xff) },
			"inline_len":                 func(b []byte) { SendWQE(b).SetInlineLen(0xffff) },
			"imm_data / invalidate_rkey": func(b []byte) { SendWQE(b).SetImmData(^uint32(0)) },
			"rkey":                       func(b []byte) { SendWQE(b).SetRKey(^uint32(0)) },
			"remote_addr":                func(b []byte) { SendWQE(b).SetRemoteAddr(^uint64(0)) },
			"compare_add":                func(b []byte) { SendWQE(b).SetCompareAdd(^uint64(0)) },
			"swap":                       func(b []byte) { SendWQE(b).SetSwap(^uint64(0)) },
			"ah":                         func(b []byte) { SendWQE(b).SetAH(^uint32(0)) },
			"remote_qpn":                 func(b []byte) { SendWQE(b).SetRemoteQPN(^uint32(0)) },
			"remote_qkey":                func(b []byte) { SendWQE(b).SetRemoteQKey(^uint32(0)) },
			"reserved":                   func(b []byte) { b[60], b[61], b[62], b[63] = 1, 1, 1, 1 },
		}},
		{"### Receive WQE record", RecvHeaderSize, map[string]setter{
			"wr_id":   func(b []byte) { RecvWQE(b).SetWRID(^uint64(0)) },
			"num_sge": func(b []byte) { RecvWQE(b).SetNumSGE(0xff) },
		}},
		{"### Completion record (CQE)", 41, map[string]setter{
			"wr_id":                       func(b []byte) { CQE(b).SetWRID(^uint64(0)) },
			"status":                      func(b []byte) { CQE(b).SetStatus(0xff) },
			"opcode":                      func(b []byte) { CQE(b).SetOpcode(0xff) },
			"sl":                          func(b []byte) { CQE(b).SetSL(0xff) },
			"dlid_path_bits":              func(b []byte) { CQE(b).SetDLIDPathBits(0xff) },
			"vendor_err":                  func(b []byte) { CQE(b).SetVendorErr(^uint32(0)) },
			"byte_len":                    func(b []byte) { CQE(b).SetByteLen(^uint32(0)) },
			"imm_data / invalidated_rkey": func(b []byte) { CQE(b).SetInvalidatedRKey(^uint32(0)) },
			"qp_num":                      func(b []byte) { CQE(b).SetQPNum(^uint32(0)) },
			"src_qp":                      func(b []byte) { CQE(b).SetSrcQP(^uint32(0)) },
			"wc_flags":                    func(b []byte) { CQE(b).SetWCFlags(^uint32(0)) },
			"pkey_index":                  func(b []byte) { CQE(b).SetPKeyIndex(0xffff) },
			"slid":                        func(b []byte) { CQE(b).SetSLID(0xffff) },
			"cqe_flags":                   func(b []byte) { CQE(b).SetSolicited(true) },
		}},
	} {
		t.Run(tc.heading, func(t *testing.T) {
			rows := docTable(t, tc.heading)
			covered := make([]bool, tc.size)
			for _, r := range rows {
				off, _ := strconv.Atoi(r[0])
				size := map[string]int{"u8": 1, "u16": 2, "u32": 4, "u64": 8}[r[1]]
				set, ok := tc.set[r[2]]
				require.True(t, ok, "no setter for %q", r[2])
				b := make([]byte, 128)
				set(b)
				for i, x := range b {
					inField := i >= off && i < off+size
					if r[2] == "cqe_flags" {
						inField = i == off
					}
					require.Equal(t, inField, x != 0, "%s: byte %d", r[2], i)
					if inField && i < tc.size {
						require.False(t, covered[i], "byte %d in two fields", i)
						covered[i] = true
					}
				}
			}
			for i, c := range covered {
				if tc.heading != "### Receive WQE record" || i < 9 {
					require.True(t, c, "byte %d in no field", i)
				}
			}
		})
	}
	// The SGE is struct ibv_sge.
	s := SGE(make([]byte, 16))
	s.Set(0x0102030405060708, 0x11121314, 0x21222324)
	require.Equal(t, []byte{8, 7, 6, 5, 4, 3, 2, 1, 0x14, 0x13, 0x12, 0x11, 0x24, 0x23, 0x22, 0x21}, []byte(s))
	// imm_data is kept in network order, as in ibv_send_wr and ibv_wc.
	w := SendWQE(make([]byte, 128))
	w.SetImmData(0x01020304)
	require.Equal(t, []byte{1, 2, 3, 4}, []byte(w[16:20]))
	require.Equal(t, uint32(0x01020304), w.ImmData())
}
