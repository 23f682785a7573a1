#!/usr/bin/env python3
"""Writes a SimGrid platform (XML) of a GPU cluster and the same machine in
dsmpi's cluster JSON format.

The machine: nodes of G devices (SimGrid hosts, one MPI rank each).  Inside
a node every device has a full-duplex link to the node's switch (NVLink
class); across nodes every device has a NIC of its own (full duplex) to a
leaf switch; a leaf switch joins `nodes_per_leaf` nodes without blocking and
has one uplink to the spine whose bandwidth is the leaf's NIC bandwidth
divided by the declared oversubscription (the uplinks of a fat tree with
ECMP, taken together).  Routes:

  same node        device link up, device link down
  same leaf        NIC up, leaf crossbar, NIC down
  other leaf       NIC up, leaf uplink up, spine, leaf uplink down, NIC down

Zones nest as world > leaf > node (full routing at each level), so a
1024-device platform stays small.  Every host carries the property
node=<its node>: dsmpi's SMPI build groups ranks into nodes by it (MPI's
shared-memory split would make every simulated host a node).  Traffic to the NIC does not cross the
device link (GPUDirect RDMA through the PCIe switch).

The cluster JSON describes what dsmpi's cluster format can: devices per
node, per-device bandwidth and latency of each level, nodes per leaf,
NICs per node and the oversubscription above a leaf.  Latencies there are
those of one message at that level (the links it crosses); SimGrid's own
per-message factors are left for the measurements to show.

Usage: make_platform.py --nodes N --gpus-per-node G --out-xml F --out-json F
       [--nodes-per-leaf L] [--oversubscription X] [--name NAME] ...
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--gpus-per-node", type=int, required=True)
    ap.add_argument("--nodes-per-leaf", type=int, default=8)
    ap.add_argument("--oversubscription", type=float, default=2.0)
    ap.add_argument("--device", default="a100-80g", help="dsmpi device spec name")
    ap.add_argument("--speed-gflops", type=float, default=1000.0,
                    help="host speed; only scales smpi_execute's flop count")
    ap.add_argument("--nvlink-GBps", type=float, default=150.0)
    ap.add_argument("--nvlink-us", type=float, default=1.0)
    ap.add_argument("--nic-GBps", type=float, default=25.0)
    ap.add_argument("--nic-us", type=float, default=2.0)
    ap.add_argument("--switch-us", type=float, default=0.5)
    ap.add_argument("--name", default=None)
    ap.add_argument("--out-xml", required=True)
    ap.add_argument("--out-json", required=True)
    a = ap.parse_args()
    if a.nodes < 1 or a.gpus_per_node < 1 or a.nodes_per_leaf < 1 or a.oversubscription < 1:
        sys.exit("make_platform.py: nodes, gpus-per-node, nodes-per-leaf >= 1 and "
                 "oversubscription >= 1 are required")
    G, N, L = a.gpus_per_node, a.nodes, min(a.nodes_per_leaf, a.nodes)
    leaves = (N + L - 1) // L
    name = a.name or "smpi-%dx%d" % (N, G)
    uplink = L * G * a.nic_GBps / a.oversubscription

    out = []
    w = out.append
    w('<?xml version="1.0"?>')
    w('<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">')
    w('<!-- %s: %d nodes x %d devices, %d nodes per leaf, %g:1 above the leaves.'
      % (name, N, G, L, a.oversubscription))
    w('     Written by tests/data/smpi/make_platform.py; see its header. -->')
    w('<platform version="4.1">')
    w('<zone id="world" routing="Full">')
    for leaf in range(leaves):
        lid = "l%d" % leaf
        w(' <zone id="%s" routing="Full">' % lid)
        first, last = leaf * L, min(N, (leaf + 1) * L)
        for n in range(first, last):
            nid = "n%d" % n
            w('  <zone id="%s" routing="Full">' % nid)
            for g in range(G):
                w('   <host id="%sg%d" speed="%gGf"><prop id="node" value="%s"/></host>'
                  % (nid, g, a.speed_gflops, nid))
            w('   <router id="%s-sw"/>' % nid)
            for g in range(G):
                w('   <link id="%sg%d-nvl" bandwidth="%gGBps" latency="%gus" '
                  'sharing_policy="SPLITDUPLEX"/>' % (nid, g, a.nvlink_GBps, a.nvlink_us))
                w('   <link id="%sg%d-nic" bandwidth="%gGBps" latency="%gus" '
                  'sharing_policy="SPLITDUPLEX"/>' % (nid, g, a.nic_GBps, a.nic_us))
            for g in range(G):
                for h in range(g + 1, G):
                    w('   <route src="%sg%d" dst="%sg%d"><link_ctn id="%sg%d-nvl" direction="UP"/>'
                      '<link_ctn id="%sg%d-nvl" direction="DOWN"/></route>'
                      % (nid, g, nid, h, nid, g, nid, h))
                w('   <route src="%sg%d" dst="%s-sw"><link_ctn id="%sg%d-nic" direction="UP"/>'
                  '</route>' % (nid, g, nid, nid, g))
            w('  </zone>')
        w('  <zone id="%s-up" routing="Full"><router id="%s-uplink"/></zone>' % (lid, lid))
        w('  <link id="%s-xbar" bandwidth="100TBps" latency="%gus" sharing_policy="FATPIPE"/>'
          % (lid, a.switch_us))
        w('  <link id="%s-up" bandwidth="%gGBps" latency="%gus" sharing_policy="SPLITDUPLEX"/>'
          % (lid, uplink, a.switch_us))
        for n in range(first, last):
            for m in range(n + 1, last):
                w('  <zoneRoute src="n%d" dst="n%d" gw_src="n%d-sw" gw_dst="n%d-sw">'
                  '<link_ctn id="%s-xbar"/></zoneRoute>' % (n, m, n, m, lid))
            w('  <zoneRoute src="n%d" dst="%s-up" gw_src="n%d-sw" gw_dst="%s-uplink">'
              '<link_ctn id="%s-up" direction="UP"/></zoneRoute>' % (n, lid, n, lid, lid))
        w(' </zone>')
    if leaves > 1:
        w(' <link id="spine" bandwidth="100TBps" latency="%gus" sharing_policy="FATPIPE"/>'
          % a.switch_us)
        for i in range(leaves):
            for j in range(i + 1, leaves):
                w(' <zoneRoute src="l%d" dst="l%d" gw_src="l%d-uplink" gw_dst="l%d-uplink">'
                  '<link_ctn id="spine"/></zoneRoute>' % (i, j, i, j))
    w('</zone>')
    w('</platform>')
    with open(a.out_xml, "w") as f:
        f.write("\n".join(out) + "\n")

    # One message's latency at each level: the links it crosses.
    levels = [
        {"name": "nvlink", "latency_us": 2 * a.nvlink_us, "bandwidth_GBps": a.nvlink_GBps},
        {"name": "leaf", "latency_us": 2 * a.nic_us + a.switch_us, "bandwidth_GBps": a.nic_GBps,
         "span": L, "oversubscription": 1, "nics_per_node": G},
    ]
    if leaves > 1:
        levels.append({"name": "spine", "latency_us": 2 * a.nic_us + 3 * a.switch_us,
                       "bandwidth_GBps": a.nic_GBps, "oversubscription": a.oversubscription})
    cluster = {"name": name, "nodes": N, "gpus_per_node": G, "device": a.device,
               "levels": levels}
    with open(a.out_json, "w") as f:
        json.dump(cluster, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
