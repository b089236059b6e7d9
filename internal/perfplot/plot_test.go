package perfplot

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/perftest"
)

func sampleResults() (perftest.Results, Baselines) {
	var res perftest.Results
	base := Baselines{Name: "memcpy (same run)"}
	for s := 2; s <= 1<<20; s *= 4 {
		res.BW = append(res.BW, perftest.BWReport{Size: uint64(s), Iters: 100, Avg: float64(s) / 10, MsgRate: 1})
		base.BW = append(base.BW, perftest.BWReport{Size: uint64(s), Iters: 100, Avg: float64(s), MsgRate: 10})
		res.Lat = append(res.Lat, perftest.LatRow{Size: s, Iters: 100, LatResult: perftest.LatResult{Typical: 2, P99: 3, P999: 4}})
		base.Lat = append(base.Lat, perftest.LatRow{Size: s, Iters: 100, LatResult: perftest.LatResult{Typical: 0.5}})
	}
	return res, base
}

// svgTexts returns the text of every <text> element of an SVG file, and
// fails unless the file is well-formed XML with an <svg> root.
func svgTexts(t *testing.T, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var texts []string
	root, inText := "", false
	for {
		tok, err := d.Token()
		if err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = e.Name.Local
			}
			inText = e.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, strings.TrimSpace(string(e)))
			}
		case xml.EndElement:
			inText = false
		}
	}
	require.Equal(t, "svg", root)
	return texts
}

func TestWriteSVG(t *testing.T) {
	res, base := sampleResults()
	path := filepath.Join(t.TempDir(), "bw.svg")
	bw := res
	bw.Lat = nil
	require.NoError(t, Write(path, Panels("ib_write_bw", bw, base, false)))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	texts := svgTexts(t, b)
	for _, want := range []string{"ib_write_bw: bandwidth", "ib_write_bw: message rate", "ib_write_bw",
		"memcpy (same run)", "BW average [MB/s]", "MsgRate [Mpps]", "message size [bytes]", "4K", "64K"} {
		require.Contains(t, texts, want)
	}
	require.NotContains(t, texts, "ib_write_bw: latency")

	lat := res
	lat.BW = nil
	path = filepath.Join(t.TempDir(), "lat.svg")
	base.Name = "Go channel ping-pong (same run)"
	require.NoError(t, Write(path, Panels("ib_send_lat", lat, base, false)))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	texts = svgTexts(t, b)
	for _, want := range []string{"ib_send_lat: latency", "ib_send_lat t_typical", "ib_send_lat 99%", "ib_send_lat 99.9%",
		"Go channel ping-pong (same run) t_typical", "latency [usec]"} {
		require.Contains(t, texts, want)
	}
}

func TestWritePNG(t *testing.T) {
	res, base := sampleResults()
	path := filepath.Join(t.TempDir(), "all.PNG")
	require.NoError(t, Write(path, Panels("ib_send_bw", res, base, true)))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	// Three panels, one above the other, 7 by 3.2 inches each at 110 dpi.
	require.Equal(t, 770, img.Bounds().Dx())
	require.Equal(t, 1056, img.Bounds().Dy())
}

func TestWriteRefuses(t *testing.T) {
	res, base := sampleResults()
	require.ErrorIs(t, Write(filepath.Join(t.TempDir(), "x.pdf"), Panels("t", res, base, false)), ErrFormat)
	require.Error(t, Write(filepath.Join(t.TempDir(), "x.svg"), nil))
}

func TestSizeLabel(t *testing.T) {
	for n, want := range map[int64]string{2: "2", 512: "512", 1024: "1K", 65536: "64K", 1 << 20: "1M", 8 << 20: "8M", 1536: "1536"} {
		require.Equal(t, want, SizeLabel(n))
	}
}
