#!/usr/bin/env python3
"""gp-agent under systemd's readiness protocol, as its unit (tools/gp-agent/gp-agent.service.in) runs it.

Starts gp-agent with the sample agent.toml that `cmake --install` installs (so the sample must parse) and
NOTIFY_SOCKET pointing at a datagram socket of this test, then checks what systemd would be told: READY=1 with the
agent's address and MAINPID once it listens; RELOADING=1 then READY=1 on SIGHUP (ExecReload); STOPPING=1 on SIGTERM
while a lease is held, the agent draining (still up) until the lease is released, then exiting 0. Also an abstract
NOTIFY_SOCKET ("@name"), as systemd may hand out.

usage: agent_service_test.py GP_AGENT GP_LEASE SAMPLE_AGENT_TOML
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

gp_agent, gp_lease, sample = sys.argv[1:4]
failures = []


def check(condition, what):
    print(("PASS: " if condition else "FAIL: ") + what, flush=True)
    if not condition:
        failures.append(what)


def receive(sock, want, timeout=20):
    """The first datagram containing `want`, or None after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            message = sock.recv(4096).decode()
        except socket.timeout:
            break
        print("  notify: " + message.replace("\n", " | "), flush=True)
        if want in message.split("\n"):
            return message
    return None


def start_agent(tmp, notify_address, name):
    env = dict(os.environ, NOTIFY_SOCKET=notify_address)
    listen = "unix:" + os.path.join(tmp, name + ".sock")
    agent = subprocess.Popen([gp_agent, "--config", sample, "--listen", listen, "--no-nvml", "--emu", "1",
                              "--emu-memory", "1GiB", "--name", name], env=env, stdout=subprocess.PIPE,
                             stderr=open(os.path.join(tmp, name + ".err"), "w"), text=True)
    return agent, listen


def stop(process):
    if process.poll() is None:
        process.kill()
        process.wait()


with tempfile.TemporaryDirectory() as tmp:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify_path = os.path.join(tmp, "notify")
    notify.bind(notify_path)
    agent, listen = start_agent(tmp, notify_path, "svc")
    holder = None
    try:
        ready = receive(notify, "READY=1")
        check(ready is not None and "STATUS=listening on " + listen in ready and
              "MAINPID=%d" % agent.pid in ready,
              "READY=1 with STATUS=listening on %s and MAINPID once the agent listens (sample agent.toml parsed)"
              % listen)

        agent.send_signal(signal.SIGHUP)  # systemctl reload
        reloading = receive(notify, "RELOADING=1")
        check(reloading is not None and "MONOTONIC_USEC=" in reloading, "SIGHUP: RELOADING=1 with MONOTONIC_USEC")
        check(receive(notify, "READY=1") is not None, "SIGHUP: READY=1 again after the reload")

        holder = subprocess.Popen([gp_lease, "hold", "-p", "0.5", "--servers", listen], stdout=subprocess.PIPE,
                                  text=True)
        token = holder.stdout.readline().strip()
        check(token.startswith("gpl1:"), "gp-lease hold printed a lease token")

        agent.send_signal(signal.SIGTERM)  # systemctl stop
        stopping = receive(notify, "STOPPING=1")
        check(stopping is not None and "1 lease(s) held" in stopping, "SIGTERM: STOPPING=1, draining 1 lease")
        time.sleep(1)
        check(agent.poll() is None, "the agent drains (still up) while the lease is held")
        holder.send_signal(signal.SIGTERM)
        check(holder.wait(timeout=20) == 0, "gp-lease released the lease on SIGTERM")
        try:
            code = agent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            code = None
        check(code == 0, "the agent exits 0 once the last lease is gone (exit status %s)" % code)
    finally:
        if holder is not None:
            stop(holder)
        stop(agent)

    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = "gpupool-test-%d" % os.getpid()
    abstract.bind("\0" + name)
    agent, listen = start_agent(tmp, "@" + name, "abstract")
    try:
        check(receive(abstract, "READY=1") is not None, "READY=1 on an abstract NOTIFY_SOCKET (@name)")
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        stop(agent)

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
