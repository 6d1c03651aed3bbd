# SPDX-FileCopyrightText: 2026 The memcuda Authors
# SPDX-License-Identifier: Apache-2.0

"""A real redis-server and a real mcd-serve for each test, as the C++ lifecycle tests have:
the tools and libmemcuda come from MCD_BIN_DIR (a build's bin/, with its lib/ beside it), else
from PATH."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BIN_DIR = os.environ.get("MCD_BIN_DIR", "")


def tool(name):
    path = os.path.join(BIN_DIR, name) if BIN_DIR else shutil.which(name)
    if not path or not os.path.exists(path):
        raise RuntimeError("%s not found: set MCD_BIN_DIR to a build's bin/ folder" % name)
    return path


if BIN_DIR and "MEMCUDA_LIBRARY" not in os.environ:
    os.environ["MEMCUDA_LIBRARY"] = os.path.join(os.path.dirname(BIN_DIR), "lib", "libmemcuda.so")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


class Node:
    """redis-server on a Unix socket and mcd-serve for one node, in a temporary folder."""

    def __init__(self, devices, *serve_args):
        self.dir = tempfile.mkdtemp(prefix="mcdpy-")
        self.socket = os.path.join(self.dir, "redis.sock")
        self.url = "unix://" + self.socket
        self.node = "py%d-%d" % (os.getpid(), int(time.monotonic() * 1000) % 100000)
        self.redis = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.socket, "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait(lambda: os.path.exists(self.socket), "redis-server")
        self.env = dict(os.environ, MCD_REDIS_URL=self.url)
        self.log = open(os.path.join(self.dir, "serve.log"), "w")
        self.serve = subprocess.Popen(
            [tool("mcd-serve"), "--devices", devices, "--node", self.node, "--heartbeat-ttl", "3",
             *serve_args],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait(lambda: "serving node" in self.serve_log(), "mcd-serve")

    def serve_log(self):
        with open(os.path.join(self.dir, "serve.log")) as f:
            return f.read()

    def _wait(self, ready, what):
        deadline = time.monotonic() + 10
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError("%s did not start" % what)
            time.sleep(0.02)

    def run(self, name, *args, check=True):
        """Runs a tool of this node; returns the CompletedProcess."""
        done = subprocess.run([tool(name), *args, "--node", self.node], env=self.env,
                              capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError("%s %s: exit %d: %s" % (name, args, done.returncode, done.stderr))
        return done

    def python(self, code, check=True):
        """Runs `code` in a fresh Python process connected to this node as `mc`."""
        prelude = ("import sys; sys.path.insert(0, %r); import memcuda, numpy as np; "
                   "mc = memcuda.connect(node=%r)\n" % (os.path.join(os.path.dirname(__file__), ".."),
                                                         self.node))
        done = subprocess.run([sys.executable, "-c", prelude + code], env=self.env,
                              capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise AssertionError("python child: exit %d: %s" % (done.returncode, done.stderr))
        return done

    def stop(self):
        self.serve.send_signal(signal.SIGTERM)
        code = self.serve.wait(20)
        self.redis.kill()
        self.redis.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return code


@pytest.fixture
def node():
    n = Node("cpu")
    os.environ["MCD_REDIS_URL"] = n.url
    yield n
    assert n.stop() == 0, n.serve_log()


@pytest.fixture
def mc(node):
    import memcuda
    return memcuda.connect(node=node.node)
