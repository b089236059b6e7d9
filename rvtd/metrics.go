package rvtd

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// Metrics: a prometheus.Collector that reads the server's state when
// scraped. Nothing is counted per packet for it: the engine counters are
// the ones Device.Counters already keeps, the rest is a walk of the
// sessions and QPs (docs/rvtd.md, "Metrics").

// Collector returns a prometheus.Collector of the server's metrics, for
// the caller to register with its own registry:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(srv.Collector())
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
func (s *Server) Collector() prometheus.Collector { return newCollector(s) }

// RegisterMetrics registers the server's Collector with reg.
func (s *Server) RegisterMetrics(reg prometheus.Registerer) error { return reg.Register(s.Collector()) }

type collector struct {
	s *Server

	port, drops                       *prometheus.Desc
	portCounters                      [transport.NumCounters]*prometheus.Desc
	clients, sessionsTotal            *prometheus.Desc
	protoErrors, badRequests          *prometheus.Desc
	qps                               *prometheus.Desc
	clientObjects, clientShm          *prometheus.Desc
	clientFDs, fdLimit                *prometheus.Desc
	userFDs, userFDLimit              *prometheus.Desc
	ringDepth, ringEntries, ringInEng *prometheus.Desc
}

// objKinds are the kinds rvtd_client_objects counts, in a fixed order.
var objKinds = [...]string{"context", "pd", "shm", "mr", "mw", "ah", "comp_channel", "cq", "qp", "cm_channel", "cm_id", "srq"}

func objKind(o any) int {
	switch o.(type) {
	case *devCtx:
		return 0
	case *pdObj:
		return 1
	case *shmObj:
		return 2
	case *mrObj:
		return 3
	case *mwObj:
		return 4
	case *ahObj:
		return 5
	case *chanObj:
		return 6
	case *cqObj:
		return 7
	case *qpObj:
		return 8
	case *cmChanObj:
		return 9
	case *cmIDObj:
		return 10
	case *srqObj:
		return 11
	}
	return -1
}

// qpTypes and qpStates are the label values rvtd_qps always has.
var (
	qpTypes  = [...]qp.Type{qp.RC, qp.UC, qp.UD}
	qpStates = [...]qp.State{qp.Reset, qp.Init, qp.RTR, qp.RTS, qp.SQD, qp.SQE, qp.Err}
)

func newCollector(s *Server) *collector {
	dp := []string{"device", "port"}
	cl := []string{"session", "pid", "comm"}
	rg := []string{"device", "qpn", "session", "ring"}
	c := &collector{
		s:             s,
		drops:         prometheus.NewDesc("rvtd_port_drops_total", "Received packets the engine dropped, by reason (the drop_<reason> counters).", append(dp, "reason"), nil),
		clients:       prometheus.NewDesc("rvtd_clients", "Client sessions connected.", nil, nil),
		sessionsTotal: prometheus.NewDesc("rvtd_sessions_total", "Client sessions accepted since start.", nil, nil),
		protoErrors:   prometheus.NewDesc("rvtd_protocol_errors_total", "Sessions ended for a protocol error.", nil, nil),
		badRequests:   prometheus.NewDesc("rvtd_bad_requests_total", "Requests refused for a malformed body or an unknown opcode.", nil, nil),
		qps:           prometheus.NewDesc("rvtd_qps", "Client QPs, by device, type and state.", []string{"device", "type", "state"}, nil),
		clientObjects: prometheus.NewDesc("rvtd_client_objects", "Objects a client session holds, by kind.", append(cl, "kind"), nil),
		clientShm:     prometheus.NewDesc("rvtd_client_shm_bytes", "Bytes of shared memory a client session has allocated (counted against limits.mem_bytes).", cl, nil),
		clientFDs:     prometheus.NewDesc("rvtd_client_descriptors", "The daemon's file descriptors a client session holds (counted against limits.fds).", cl, nil),
		fdLimit:       prometheus.NewDesc("rvtd_client_descriptors_limit", "The daemon's file descriptors one client session may hold (limits.fds, or its default from RLIMIT_NOFILE).", nil, nil),
		userFDs:       prometheus.NewDesc("rvtd_user_descriptors", "The daemon's file descriptors the sessions of a client user hold together (counted against limits.user_fds).", []string{"uid"}, nil),
		userFDLimit:   prometheus.NewDesc("rvtd_user_descriptors_limit", "The daemon's file descriptors the sessions of one client user may hold together (limits.user_fds, or its default from RLIMIT_NOFILE).", nil, nil),
		ringDepth:     prometheus.NewDesc("rvtd_qp_ring_depth", "Work requests in a QP's ring that the daemon has not released: posted by the client, waiting or on the engine.", rg, nil),
		ringInEng:     prometheus.NewDesc("rvtd_qp_ring_in_engine", "Work requests of a QP's ring handed to the engine and not yet completed.", rg, nil),
		ringEntries:   prometheus.NewDesc("rvtd_qp_ring_entries", "Slots of a QP's ring.", rg, nil),
	}
	for i := transport.Counter(0); i < transport.NumCounters; i++ {
		c.portCounters[i] = prometheus.NewDesc("rvtd_port_"+i.String()+"_total",
			"The engine's "+i.String()+" counter (rxe hw_counters name).", dp, nil)
	}
	return c
}

func (c *collector) descs() []*prometheus.Desc {
	d := []*prometheus.Desc{c.drops, c.clients, c.sessionsTotal, c.protoErrors, c.badRequests, c.qps,
		c.clientObjects, c.clientShm, c.clientFDs, c.fdLimit, c.userFDs, c.userFDLimit, c.ringDepth, c.ringInEng, c.ringEntries}
	return append(d, c.portCounters[:]...)
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It takes the locks in the
// package's order, one at a time: Server.mu for the session list, each
// session.mu for its objects, each qpObj.mu for its rings.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	s.mu.Lock()
	devices := s.devices
	served := s.nextSess
	s.mu.Unlock()
	sessions := s.sessionList()
	gauge(c.clients, float64(len(sessions)))
	counter(c.sessionsTotal, float64(served))
	counter(c.protoErrors, float64(s.protoErrors.Load()))
	counter(c.badRequests, float64(s.badRequests.Load()))
	gauge(c.fdLimit, float64(s.fdLimit))
	gauge(c.userFDLimit, float64(s.userFDLimit))
	s.umu.Lock()
	users := make(map[uint32]int, len(s.users))
	for uid, u := range s.users {
		users[uid] = u.fds
	}
	s.umu.Unlock()
	for uid, n := range users {
		gauge(c.userFDs, float64(n), strconv.FormatUint(uint64(uid), 10))
	}

	for _, d := range devices {
		name := d.cfg.Name
		m := d.dev.Counters() // the device's one port
		for i := transport.Counter(0); i < transport.NumCounters; i++ {
			counter(c.portCounters[i], float64(m[i.String()]), name, "1")
		}
		for r := transport.DropReason(1); r < transport.NumDropReasons; r++ {
			counter(c.drops, float64(m["drop_"+r.Name()]), name, "1", r.Name())
		}

		var n [len(qpTypes)][len(qpStates)]int
		d.qps.Range(func(_, v any) bool {
			q := v.(*qpObj)
			t, st := qp.Type(q.typ), q.qp.State()
			for i, tt := range qpTypes {
				if tt == t && int(st) < len(qpStates) {
					n[i][st]++
				}
			}
			sess := strconv.FormatUint(uint64(q.sess.id), 10)
			qpn := strconv.FormatUint(uint64(q.qpn), 10)
			q.mu.Lock()
			type ringv struct {
				name                string
				depth, inEng, slots int
			}
			var rings []ringv
			if !q.dead {
				if q.sq != nil && !q.sqFailed {
					if a, err := q.sq.Available(); err == nil {
						rings = append(rings, ringv{"send", a, int(q.sqTaken), q.sq.Entries()})
					}
				}
				if q.rr != nil {
					if a, taken, entries, ok := q.rr.depth(); ok {
						rings = append(rings, ringv{"recv", a, taken, entries})
					}
				}
			}
			q.mu.Unlock()
			for _, r := range rings {
				gauge(c.ringDepth, float64(r.depth), name, qpn, sess, r.name)
				gauge(c.ringInEng, float64(r.inEng), name, qpn, sess, r.name)
				gauge(c.ringEntries, float64(r.slots), name, qpn, sess, r.name)
			}
			return true
		})
		for i, t := range qpTypes {
			for j, st := range qpStates {
				gauge(c.qps, float64(n[i][j]), name, t.String(), st.String())
			}
		}
	}

	for _, ss := range sessions {
		var k [len(objKinds)]int
		ss.mu.Lock()
		for _, o := range ss.objs {
			if i := objKind(o); i >= 0 {
				k[i]++
			}
		}
		mem, fds := ss.mem, ss.fds
		ss.mu.Unlock()
		l := []string{strconv.FormatUint(uint64(ss.id), 10), strconv.FormatUint(uint64(ss.pid), 10), ss.comm}
		for i, kind := range objKinds {
			gauge(c.clientObjects, float64(k[i]), append(l[:3:3], kind)...)
		}
		gauge(c.clientShm, float64(mem), l...)
		gauge(c.clientFDs, float64(fds), l...)
	}
}
