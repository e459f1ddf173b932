"""The two sides of `agent_bench` for one agent: its `impyard run` end to end, and a bare
`docker run` of the same image, adapter command and scripted conversation.

Both sides run the agent's row as data (`impyard.box.images.agents.Agent`): its image, its
adapter command (`/bin/sh -c <command>`, as Impyard runs it), and the scripted model
server speaking the agent's own API (`ModelServer(protocol=agent.api)`, the note
script). The bare side is what a `--network none` box minimally needs to reach a model:
the box's hardening and the deployed policy's limits (CPU, memory, processes), the
environment an Impyard box gets (the model, the task file, the knowledge directory and
namespace, the proxy variables and the ready file box-init waits for), and the model
server bound straight into the box's loopback on the gateway's port, where the adapter's
`$HTTP_PROXY/route/<route>` base URL lands (no gateway, no policy, no checkpoint). Its
knowledge directory holds the tree the imp's checkout starts from. Left out, as the
gateway's own work: the CA bundle an Impyard box gets while the gateway inspects TLS
(`NODE_EXTRA_CA_CERTS` and the like; no request of either side uses TLS).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import impyard, scratch_dir
from impyard.box.images.agents import MODEL_ENV, Agent
from impyard.devtools.model_server import Conversation, ModelServer, Reply, Script, note_script
from impyard.gateway.wiring.boxside import BOX_READY_PATH, READY_FILE, WAIT_FOR_ENV, proxy_env
from impyard.gateway.wiring.netns import listen_in_netns
from impyard.home import Home
from impyard.policy.compile import deployed_org_policy
from impyard.policy.models import BoxPolicy
from impyard.runs.provision.boxspec import BOX_TASK

SECRET = "bench-placeholder-key"
PORT = 3128
MODEL = "scripted-model"
PROMPT = "Write one note."
#: Longer than any sane three-turn run: a hung agent fails the bench instead of holding it.
BARE_TIMEOUT_SECONDS = 300
KNOWLEDGE = "/opt/impyard/knowledge"


def _wait(ready: Callable[[], bool], seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit("agent bench: serve's run socket or a ready box never came")
        time.sleep(0.01)


def conversation(model_seconds: float) -> Script:
    """The note script (shell, write, answer), each answer after ``model_seconds``."""
    script = note_script()

    def answer(request: Conversation) -> Reply:
        return script(request).after(model_seconds)

    return answer


@dataclass
class AgentSides:
    """One agent's Impyard data root (an imp ``bench`` running it, its route to ``model``)
    and the bare side's scratch directory, under one runtime."""

    agent: Agent
    image: str
    runtime: str
    model: ModelServer
    home: Path
    limits: BoxPolicy
    model_seconds: float

    @classmethod
    def set_up(
        cls, agent: Agent, image: str, runtime: str, model: ModelServer, model_seconds: float
    ) -> AgentSides:
        home = scratch_dir(f"impyard-agentbench-{agent.name}-")
        impyard(home, "init", env={"IMPYARD_INIT_RUNTIME": runtime})
        org = home / "policy" / "org.toml"
        # The owner's policy for the agent, from its row: the route its adapter calls by
        # default, the key in the header its API expects.
        value = agent.value.replace('"', '\\"')
        org.write_text(
            org.read_text()
            + f'\n[box.env]\n{MODEL_ENV} = "{MODEL}"\n'
            + f'\n[[gateway.route]]\nname = "{agent.default_model_route}"\n'
            + f'upstream = "{model.url}"\nheader = "{agent.header}"\nvalue = "{value}"\n'
            + 'secret_env = "IMPYARD_SECRET_LLM"\nmethods = ["POST"]\nallow_private = true\n'
        )
        impyard(home, "deploy")
        impyard(home, "imp", "create", "bench", "--agent", agent.name, "--image", image)
        (home / "bare").mkdir()
        (home / "bare" / "task.md").write_text(PROMPT + "\n")
        # The bare box's knowledge is the tree the imp's checkout starts from.
        tree = subprocess.run(
            ["git", "--git-dir", str(Home(home).repo("bench")), "archive", "main"],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(tree)) as archive:
            archive.extractall(home / "bare" / "seed", filter="data")
        limits = deployed_org_policy(Home(home)).box
        return cls(agent, image, runtime, model, home, limits, model_seconds)

    def tear_down(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)

    @contextlib.contextmanager
    def serving_warm(self) -> Iterator[None]:
        """The imp's runs on ready boxes from here on: the org keeps one (``[box.warm]``)
        and ``impyard serve`` (with the route's secret, as the runs have it) keeps it
        filled and takes the runs handed to it. One run first records the imp's box
        shape (excluded)."""
        org = self.home / "policy" / "org.toml"
        org.write_text(org.read_text().replace("boxes = 0", "boxes = 1", 1))
        impyard(self.home, "deploy")
        console = str(Path(sys.executable).parent / "impyard")
        env = {**os.environ, "IMPYARD_SECRET_LLM": SECRET}
        serve = subprocess.Popen(
            [console, "--home", str(self.home), "serve"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            _wait(lambda: (self.home / "serve" / "run.sock").is_socket())
            self.impyard_run()
            yield
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(timeout=120)

    def wait_ready(self) -> None:
        """Until serve's pool has a ready box (before a warm run, untimed)."""
        _wait(lambda: any((self.home / "warm").glob("*/*/ready")))

    def warm_run(self) -> int:
        """`impyard run` handed to serve, on a ready box; returns the model turns it took."""
        record: dict[str, object] = {}
        turns = self.impyard_run(record)
        if not (record.get("warm") and record.get("handed")):
            raise SystemExit(f"{self.agent.name}: the warm run was not a handed ready-box run")
        return turns

    def impyard_run(self, record: dict[str, object] | None = None) -> int:
        """`impyard run` end to end; returns the model turns it took (and its record in
        ``record``)."""
        before = len(self.model.turns())
        result = impyard(
            self.home,
            "run",
            "bench",
            "--prompt",
            PROMPT,
            "--json",
            check=False,
            env={"IMPYARD_SECRET_LLM": SECRET},
        )
        if record is not None and result.returncode == 0:
            record.update(json.loads(result.stdout))
        if result.returncode != 0 or json.loads(result.stdout)["checkpoint"] != "integrated":
            raise SystemExit(
                f"{self.agent.name}: impyard run failed ({result.returncode}): "
                f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )
        return len(self.model.turns()) - before

    def bare_run(self) -> int:
        """The same box work with plain docker; returns the model turns it took."""
        work = self.home / "bare"
        knowledge, signal = work / "knowledge", work / "signal"
        shutil.rmtree(knowledge, ignore_errors=True)
        shutil.rmtree(signal, ignore_errors=True)
        shutil.copytree(work / "seed", knowledge)
        signal.mkdir()
        uid, gid = (int(part) for part in self.limits.user.split(":"))
        for path in (knowledge, *knowledge.rglob("*")):
            os.chown(path, uid, gid)
        container = subprocess.run(
            self._docker_run(work), capture_output=True, text=True, check=True
        ).stdout.strip()
        try:
            pid = int(
                subprocess.run(
                    ["docker", "inspect", "-f", "{{.State.Pid}}", container],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            model = ModelServer(
                self.model.script,
                sock=listen_in_netns(pid, "127.0.0.1", PORT),
                protocol=self.agent.api,
            )
            with model:
                (signal / READY_FILE).write_text("ready\n")
                status = subprocess.run(
                    ["docker", "wait", container],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=BARE_TIMEOUT_SECONDS,
                ).stdout.strip()
        finally:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)
        seeded = work / "seed"
        notes = [
            p
            for p in (knowledge / "records").rglob("*.md")
            if not (seeded / p.relative_to(knowledge)).exists()
        ]
        if status != "0" or not notes:
            raise SystemExit(f"{self.agent.name}: bare run failed with status {status}")
        return len(model.turns())

    def _docker_run(self, work: Path) -> list[str]:
        """`docker run -d` under the box's hardening and the policy's limits (the CPU quota
        matters most: under runsc, gVisor's own kernel works inside it)."""
        limits = self.limits
        env = {
            MODEL_ENV: MODEL,
            "IMPYARD_TASK_FILE": BOX_TASK,
            "TMPDIR": "/tmp",
            "HOME": "/tmp",
            "IMPYARD_KNOWLEDGE_DIR": KNOWLEDGE,
            "IMPYARD_KNOWLEDGE_NAMESPACE": "n_000000000000",
            **proxy_env(PORT),
            WAIT_FOR_ENV: BOX_READY_PATH,
        }
        # The host's signal directory is mounted where box-init looks for the ready file.
        signal_dir = BOX_READY_PATH.rsplit("/", 1)[0]
        return [
            "docker",
            "run",
            "-d",
            "--runtime",
            self.runtime,
            "--network",
            "none",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            limits.user,
            "--tmpfs",
            "/tmp:rw,nosuid,nodev,size=2147483648,mode=1777",
            "--cpus",
            str(limits.cpus),
            "--memory",
            str(limits.memory_bytes),
            "--memory-swap",
            str(limits.memory_bytes),
            "--pids-limit",
            str(limits.pids_limit),
            "-v",
            f"{work / 'knowledge'}:{KNOWLEDGE}",
            "-v",
            f"{work / 'task.md'}:{BOX_TASK}:ro",
            "-v",
            f"{work / 'signal'}:{signal_dir}:ro",
            *(arg for key, value in env.items() for arg in ("-e", f"{key}={value}")),
            "--entrypoint",
            "/opt/impyard/bin/box-init",
            self.image,
            "/bin/sh",
            "-c",
            self.agent.command,
        ]
