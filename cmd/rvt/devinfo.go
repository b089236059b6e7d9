package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/rvt"
)

// devinfoConfig are the flags of `rvt devinfo`.
type devinfoConfig struct {
	Loopback bool // open the device with no link
	LinkMTU  int  // Ethernet MTU of the fabric port
	Verbose  bool // print the device limits too (ibv_devinfo -v)
	RVTD     string
	Device   string // -d: the device (with RVTD: the daemon's)
}

func defaultDevinfoConfig() devinfoConfig {
	return devinfoConfig{LinkMTU: devopen.DefaultLinkMTU, Verbose: true, Device: "rvt0"}
}

// runDevinfo opens device rvt0 (on an in-memory fabric, or loopback only)
// and prints its attributes the way ibv_devinfo -v does.
func runDevinfo(w io.Writer, cfg devinfoConfig) error {
	if cfg.RVTD != "" {
		if cfg.Loopback {
			return usagef("--rvtd and --loopback: the daemon's device has the link rvtd gave it")
		}
		dev, err := rvt.Dial(cfg.RVTD, cfg.Device)
		if err != nil {
			return err
		}
		defer dev.Close()
		return printDevinfo(w, dev, cfg.Verbose)
	}
	if cfg.Device != "rvt0" {
		return usagef("-d %s: IB device %s not found (without --rvtd, devinfo opens rvt0)", cfg.Device, cfg.Device)
	}
	mac, addrs := devopen.NodeAddrs(0)
	o := rvt.Options{Name: "rvt0", MAC: mac, Addrs: addrs}
	if !cfg.Loopback {
		l := devopen.FabricPort(fabric.New(clock.Real(), 1), mac, addrs, cfg.LinkMTU)
		defer l.Close()
		o = l.Options("rvt0")
	}
	dev, err := rvt.Open(o)
	if err != nil {
		return err
	}
	defer dev.Close()
	return printDevinfo(w, dev, cfg.Verbose)
}

// guidString formats a GUID as ibv_devinfo does: four groups of four hex
// digits.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// mtuString is "4096 (5)".
func mtuString(m rvt.MTU) string { return fmt.Sprintf("%d (%d)", m.Bytes(), uint8(m)) }

func printDevinfo(w io.Writer, dev *rvt.Device, verbose bool) error {
	a := dev.QueryDevice()
	kv := func(indent, k string, v any) {
		// ibv_devinfo aligns values with tabs: column 40 for the device,
		// 48 for the port.
		target := 40
		if len(indent) > 1 {
			target = 48
		}
		col := len(indent)*8 + len(k) + 1
		n := max(1, (target-col+7)/8)
		tabs := strings.Repeat("\t", n)
		fmt.Fprintf(w, "%s%s:%s%v\n", indent, k, tabs, v)
	}
	fmt.Fprintf(w, "hca_id:\t%s\n", dev.Name())
	kv("\t", "transport", "InfiniBand (0)")
	kv("\t", "fw_ver", a.FWVer)
	kv("\t", "node_guid", guidString(a.NodeGUID))
	kv("\t", "sys_image_guid", guidString(a.SysImageGUID))
	kv("\t", "vendor_id", fmt.Sprintf("%#x", a.VendorID))
	kv("\t", "vendor_part_id", a.VendorPartID)
	kv("\t", "hw_ver", fmt.Sprintf("%#x", a.HWVer))
	kv("\t", "phys_port_cnt", a.PhysPortCnt)
	if verbose {
		kv("\t", "max_mr_size", fmt.Sprintf("%#x", a.MaxMRSize))
		kv("\t", "page_size_cap", fmt.Sprintf("%#x", a.PageSizeCap))
		kv("\t", "max_qp", a.MaxQP)
		kv("\t", "max_qp_wr", a.MaxQPWR)
		kv("\t", "max_sge", a.MaxSGE)
		kv("\t", "max_sge_rd", a.MaxSGERd)
		kv("\t", "max_cq", a.MaxCQ)
		kv("\t", "max_cqe", a.MaxCQE)
		kv("\t", "max_mr", a.MaxMR)
		kv("\t", "max_pd", a.MaxPD)
		kv("\t", "max_qp_rd_atom", a.MaxQPRdAtom)
		kv("\t", "max_res_rd_atom", a.MaxResRdAtom)
		kv("\t", "max_qp_init_rd_atom", a.MaxQPInitRdAtom)
		atomic := "ATOMIC_NONE (0)"
		switch a.AtomicCap {
		case "HCA":
			atomic = "ATOMIC_HCA (1)"
		case "GLOB":
			atomic = "ATOMIC_GLOB (2)"
		}
		kv("\t", "atomic_cap", atomic)
		kv("\t", "max_mw", a.MaxMW)
		kv("\t", "max_mcast_grp", a.MaxMcastGrp)
		kv("\t", "max_mcast_qp_attach", a.MaxMcastQPAttach)
		kv("\t", "max_total_mcast_qp_attach", a.MaxTotalMcastQPAttach)
		kv("\t", "max_ah", a.MaxAH)
		kv("\t", "max_srq", a.MaxSRQ)
		kv("\t", "max_srq_wr", a.MaxSRQWR)
		kv("\t", "max_srq_sge", a.MaxSRQSGE)
		kv("\t", "max_pkeys", a.MaxPkeys)
		kv("\t", "max_inline_data", a.MaxInlineData)
		kv("\t", "max_msg_sz", fmt.Sprintf("%#x", a.MaxMsgSize))
	}
	for port := 1; port <= a.PhysPortCnt; port++ {
		pa, err := dev.QueryPort(uint8(port))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\t\tport:\t%d\n", port)
		state := "PORT_" + pa.State
		if pa.State == "ACTIVE" {
			state += " (4)"
		}
		kv("\t\t\t", "state", state)
		kv("\t\t\t", "max_mtu", mtuString(pa.MaxMTU))
		kv("\t\t\t", "active_mtu", mtuString(pa.ActiveMTU))
		kv("\t\t\t", "sm_lid", pa.SMLID)
		kv("\t\t\t", "port_lid", pa.LID)
		kv("\t\t\t", "port_lmc", "0x00")
		kv("\t\t\t", "link_layer", pa.LinkLayer)
		if verbose {
			kv("\t\t\t", "pkey_tbl_len", pa.PkeyTblLen)
			kv("\t\t\t", "gid_tbl_len", pa.GIDTblLen)
			kv("\t\t\t", "active_width", pa.ActiveWidth)
			kv("\t\t\t", "active_speed", pa.ActiveSpeed)
			kv("\t\t\t", "phys_state", "LINK_UP (5)")
		}
		for i := 0; i < pa.GIDTblLen; i++ {
			g, err := dev.QueryGID(uint8(port), i)
			if err != nil {
				return err
			}
			kv("\t\t\t", fmt.Sprintf("GID[%3d]", i), g.String()+", RoCE v2")
		}
		for i := 0; i < pa.PkeyTblLen; i++ {
			pk, err := dev.QueryPKey(uint8(port), i)
			if err != nil {
				return err
			}
			kv("\t\t\t", fmt.Sprintf("PKey[%3d]", i), fmt.Sprintf("%#04x", pk))
		}
	}
	return nil
}
