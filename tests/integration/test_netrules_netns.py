"""The partition and loss rules really cut traffic, measured from outside: two network
namespaces of our own joined by a veth pair, a TCP listener in one, connects from the other."""

import shutil
import subprocess
import time
import uuid

import pytest

from kafkaesque_harness.clusters import netrules

pytestmark = pytest.mark.integration


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


@pytest.fixture
def two_hosts():
    if shutil.which("ip") is None or shutil.which("iptables") is None:
        pytest.fail("iproute2 and iptables are required (make setup installs them)")
    tag = uuid.uuid4().hex[:6]
    a, b = f"kqa{tag}", f"kqb{tag}"
    sh("ip", "netns", "add", a)
    sh("ip", "netns", "add", b)
    try:
        sh("ip", "link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        sh("ip", "link", "set", f"va{tag}", "netns", a)
        sh("ip", "link", "set", f"vb{tag}", "netns", b)
        for ns, dev, addr in ((a, f"va{tag}", "10.250.0.1/24"), (b, f"vb{tag}", "10.250.0.2/24")):
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", addr, "dev", dev)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", dev, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield a, b, f"vb{tag}"
    finally:
        sh("ip", "netns", "del", a, check=False)
        sh("ip", "netns", "del", b, check=False)


def in_ns(ns: str, argv: list[str]) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *argv, check=False)


def can_connect(ns_from: str, ns_to: str, addr: str, port: int = 7000) -> bool:
    server = subprocess.Popen(["ip", "netns", "exec", ns_to, "python3", "-c",
                               f"import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                               f"s.bind(('0.0.0.0',{port}));s.listen();s.settimeout(3)\n"
                               "try:\n c,_=s.accept();c.close()\nexcept OSError: pass"])
    try:
        r = in_ns(ns_from, ["python3", "-c",
                            f"import socket,time\nfor i in range(20):\n try:\n  socket.create_connection(('{addr}',{port}),timeout=1).close();print('ok');break\n except ConnectionRefusedError: time.sleep(0.05)\n except OSError: break"])
        return r.stdout.strip() == "ok"
    finally:
        server.kill()
        server.wait()


def test_drop_rule_cuts_tcp_and_heal_restores_it(two_hosts):
    a, b, _ = two_hosts
    assert can_connect(a, b, "10.250.0.2")
    for argv in netrules.chain_setup() + netrules.drop_from(["10.250.0.1"]):
        assert in_ns(b, argv).returncode == 0
    assert not can_connect(a, b, "10.250.0.2")
    for argv in netrules.heal():
        in_ns(b, argv)
    assert can_connect(a, b, "10.250.0.2")
    for argv in netrules.remove_chain():
        in_ns(b, argv)
    assert netrules.CHAIN not in in_ns(b, ["iptables", "-S"]).stdout


def test_certain_random_loss_drops_everything(two_hosts):
    a, b, _ = two_hosts
    for argv in netrules.chain_setup() + netrules.random_loss_from(["10.250.0.1"], 1.0):
        assert in_ns(b, argv).returncode == 0
    assert not can_connect(a, b, "10.250.0.2")


def test_tbf_slows_a_transfer(two_hosts):
    a, b, dev_b = two_hosts
    # b sends 400 kB to a; a (the receiver) times it, since sendall returns once buffered.
    send = "import socket\ns=socket.create_connection(('10.250.0.1',7001),timeout=5)\ns.sendall(b'x'*400000);s.close()"
    recv = ("import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
            "s.bind(('0.0.0.0',7001));s.listen();c,_=s.accept();t=time.monotonic()\n"
            "while c.recv(65536): pass\nprint(time.monotonic()-t)")

    def transfer_seconds() -> float:
        server = subprocess.Popen(["ip", "netns", "exec", a, "python3", "-c", recv], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        in_ns(b, ["python3", "-c", send])
        out, _ = server.communicate(timeout=30)
        return float(out.strip())

    fast = transfer_seconds()
    assert in_ns(b, netrules.bandwidth_limit(dev_b, rate="1mbit")).returncode == 0
    slow = transfer_seconds()  # 400 kB at 1 Mbit/s is about 3 s
    in_ns(b, netrules.clear_qdisc(dev_b))
    assert slow > 1.5 and slow > 5 * fast
