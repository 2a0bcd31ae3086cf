"""Pods on one machine: the JobManager of `make flink-up`, and each TaskManager with its Beam
worker pool, get a network namespace of their own (their own `localhost`, as a pod's containers
share one), joined by a bridge, as a pod network joins pods; the machine (the job server, the
submitting run) reaches them through the bridge, as a Service would.

    bridge tfxfl<N>br 10.213.<N>.1/24 (this machine's end)
      veth tfxfl<N>p<i> <-> eth0 10.213.<N>.<10+i>/24 in namespace tfxfl<N>-<pod i's name>

Needs root and iproute2 (`ip`); `available()` says why not otherwise. The addresses exist only on
this bridge and in these namespaces, which `create` makes and `delete` removes (nothing else is
touched). A /24 not routed on this machine is picked, so two clusters (two test workers) never
share one.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import List, Optional

PREFIX = "tfxfl"


@dataclass
class Network:
    number: int  # the third octet, and the names' tag
    pods: List[str]  # e.g. ["jm", "tm1", "tm2"]

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.number}br"

    @property
    def host_address(self) -> str:
        return f"10.213.{self.number}.1"

    def namespace(self, pod: str) -> str:
        return f"{PREFIX}{self.number}-{pod}"

    def address(self, pod: str) -> str:
        return f"10.213.{self.number}.{10 + self.pods.index(pod)}"

    def exec_prefix(self, pod: str) -> List[str]:
        """Runs a command inside pod's namespace: `ip netns exec` setns()es and then execs it,
        so the pid Popen sees is the command's own."""
        return [shutil.which("ip") or "ip", "netns", "exec", self.namespace(pod)]

    def as_dict(self) -> dict:
        return asdict(self)


def available() -> Optional[str]:
    """Why namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no `ip` (Debian iproute2: scripts/install_test_tools.sh)"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise OSError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _free_number() -> int:
    routed = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True,
                            text=True, timeout=30).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           timeout=30).stdout
    for number in range(1, 255):
        net = ipaddress.ip_network(f"10.213.{number}.0/24")
        taken = any(net.overlaps(ipaddress.ip_network(word, strict=False))
                    for word in routed.split() if "/" in word and word[0].isdigit())
        if not taken and f"{PREFIX}{number}br" not in links:
            return number
    raise OSError("no free 10.213.N.0/24 for the cluster's bridge")


def create(pods: List[str]) -> Network:
    """A bridge and a namespace per pod wired to it; on any failure, removes what it made."""
    network = Network(_free_number(), list(pods))
    try:
        _ip("link", "add", network.bridge, "type", "bridge")
        _ip("addr", "add", f"{network.host_address}/24", "dev", network.bridge)
        _ip("link", "set", network.bridge, "up")
        for index, pod in enumerate(network.pods):
            name, host_end = network.namespace(pod), f"{PREFIX}{network.number}p{index}"
            _ip("netns", "add", name)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", name)
            _ip("link", "set", host_end, "master", network.bridge)
            _ip("link", "set", host_end, "up")
            _ip("-n", name, "addr", "add", f"{network.address(pod)}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", "eth0", "up")
    except OSError:
        delete(network.as_dict())
        raise
    return network


def delete(recorded: dict) -> None:
    """Removes the namespaces (their veth pairs go with them) and the bridge; what is already
    gone is skipped."""
    network = Network(**recorded)
    for pod in network.pods:
        subprocess.run(["ip", "netns", "del", network.namespace(pod)], capture_output=True,
                       timeout=30)
    subprocess.run(["ip", "link", "del", network.bridge], capture_output=True, timeout=30)
