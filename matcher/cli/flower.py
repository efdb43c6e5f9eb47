"""``pilotfish flower``: Flower behind a login, on the control plane's broker, with no password in sight.

``pilotfish up`` runs it. It builds Pilotfish's Celery app from the settings (the broker's URL comes from
the embedded server's credentials or the deployment's secrets file, never from the environment or the
command line) and runs Flower's own command in this process, marked non-dumpable like every Pilotfish
process. The login is generated once into ``<state_dir>/flower/login`` (``user:password``, 0600) and given
to Flower through a config file beside it (``flowerconfig.py``, 0600: Flower's ``--conf``); with it, Flower's
UI and its API (terminate, revoke, cancel-consumer) answer only authenticated requests, the others get 401.
``pilotfish flower --login`` prints the URL and the login.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import click

from taskqueues.context import Context
from taskqueues.credentials import write_private
from taskqueues.errors import ConfigError
from taskqueues.settings import Settings

#: The user name of the generated login.
FLOWER_USER = "pilotfish"


def login_file(state_dir: str | Path) -> Path:
    return Path(state_dir) / "flower" / "login"


def login(state_dir: str | Path) -> str:
    """``user:password`` of this deployment's Flower, generated at first use."""
    path = login_file(state_dir)
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = f"{FLOWER_USER}:{secrets.token_urlsafe(18)}"
        write_private(path, text + "\n")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read Flower's login: {exc.strerror or exc}") from None
    if ":" not in text or text.startswith(":"):
        raise ConfigError(f"{path}: Flower's login must be one line user:password")
    return text


def config_file(state_dir: str | Path) -> Path:
    """Flower's config file (``basic_auth``), written from the login at each start."""
    path = Path(state_dir) / "flower" / "flowerconfig.py"
    write_private(path, f"basic_auth = [{login(state_dir)!r}]\n")
    return path


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--login", "show_login", is_flag=True, help="Print Flower's URL and login (user:password), then exit.")
@click.argument("flower_args", nargs=-1, type=click.UNPROCESSED)
def flower(show_login: bool, flower_args: tuple[str, ...]) -> None:
    """Run Flower on the control plane's broker behind this deployment's login (what `up` starts); other
    arguments go to Flower (--port, --address...)."""
    settings = Settings.load()
    if show_login:
        click.echo(f"http://127.0.0.1:{settings.flower_port}  login {login(settings.state_dir)}")
        click.echo(f"(kept in {login_file(settings.state_dir)})")
        return
    from matcher.app.celery_app import configure

    app = configure(Context(settings))
    app.start(["flower", f"--conf={config_file(settings.state_dir)}", *flower_args])
