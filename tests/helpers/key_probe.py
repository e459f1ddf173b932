"""The key-absence proof every agent's docker tests run: a scripted model whose first
turn makes the agent look for the provider's key everywhere a box can look."""

from __future__ import annotations

import base64

from impyard.devtools.model_server import Conversation, Reply, Script, shell_call


def secret_probe_script(secret: str, show_config: str) -> Script:
    """Search every process's environment and command line and the box's writable and
    baked files for ``secret``, then print ``hits=0`` or ``hits=1``, the environment and
    the agent's config file (``show_config``, a path the shell expands), through the
    agent's own shell tool. The key never sits plainly in a file or an environment of
    the probe itself: the pattern arrives base64-encoded in the command."""
    encoded = base64.b64encode(secret.encode()).decode()
    probe = (
        f"s=$(echo {encoded} | base64 -d); hits=0; "
        'for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -qaF -e "$s" "$f" '
        '2>/dev/null && echo "hit $f" && hits=1; done; '
        'grep -rlaF -e "$s" /tmp /opt/impyard /etc 2>/dev/null && hits=1; '
        f'echo "hits=$hits"; env | sort; cat "{show_config}"'
    )

    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            return shell_call(conversation, probe)
        return Reply.say("Looked everywhere.")

    return script
