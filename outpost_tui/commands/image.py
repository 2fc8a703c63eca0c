"""`outpost-tui image build`: a local container image for sandboxed races, without any registry."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .. import exitcodes

EPILOG = """\
examples:
  outpost-tui image build
      this machine's python3 + git in a small image (local/outpost-sample:latest)
  outpost-tui image build --tag local/debian-dev:bookworm --from-rootfs rootfs.tar
      import a root filesystem archive (e.g. from `debootstrap`, then `tar -C root -cf rootfs.tar .`)
  outpost-tui image build --tag local/my-agent:1 --dockerfile ./image
      build ./image/Dockerfile with ./image as the context (never pulls by itself)

The engine is DOCKER_HOST, else the usual Docker and Podman sockets; --endpoint overrides both.
Name the image in the race file: [sandbox] provider = "podman", image = "local/outpost-sample:latest".

exit codes: 0 built, 1 the build failed, 2 bad arguments (tag, archive or Dockerfile missing),
9 no container engine reachable
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "image",
        help="build a local container image for sandboxed races",
        description='Container images for [sandbox] provider = "docker" or "podman".',
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", parser_class=type(parser))
    build = actions.add_parser(
        "build",
        help="build an image without any registry",
        description="Build an image for the sandbox without any registry: by default from this "
        "machine's python3 and git (enough for the sample races), or from a root "
        "filesystem archive, or from a Dockerfile with a local context.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from ..engine.core.spec import DEFAULT_IMAGE

    build.add_argument("--tag", default=DEFAULT_IMAGE, help=f"image name (default {DEFAULT_IMAGE})")
    source = build.add_mutually_exclusive_group()
    source.add_argument(
        "--from-rootfs",
        metavar="TAR",
        type=Path,
        help="import this root filesystem archive (tar, optionally compressed)",
    )
    source.add_argument(
        "--dockerfile", metavar="DIR", type=Path, help="build DIR/Dockerfile with DIR as the build context"
    )
    build.add_argument(
        "--endpoint", metavar="URL", help="Docker API endpoint (unix://, tcp://, ssh://); default DOCKER_HOST"
    )
    build.set_defaults(handler=build_image, error_prefix="outpost-tui: image build")

    def no_action(args: argparse.Namespace) -> int:
        parser.print_usage(sys.stderr)
        print("outpost-tui image: error: name an action: build", file=sys.stderr)
        return exitcodes.BAD_INPUT

    parser.set_defaults(handler=no_action)


def _say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def build_image(args: argparse.Namespace) -> int:
    from docker.errors import DockerException

    from ..engine.errors import OutpostError
    from ..engine.sandbox.container_engine import connect
    from ..engine.sandbox.host_image import build_sample_image
    from ..engine.sandbox.images import ImageError, build_dockerfile, import_rootfs, parse_tag

    parse_tag(args.tag)
    if args.from_rootfs is not None and not args.from_rootfs.is_file():
        raise OutpostError(f"--from-rootfs {args.from_rootfs}: no such file")
    if args.dockerfile is not None and not (args.dockerfile / "Dockerfile").is_file():
        raise OutpostError(f"--dockerfile {args.dockerfile}: no Dockerfile there")
    client, endpoint = connect(args.endpoint, timeout=600)  # no engine: exit 9
    started = time.monotonic()
    try:
        if args.from_rootfs is not None:
            print(f"importing {args.from_rootfs} on {endpoint}", file=sys.stderr, flush=True)
            image_id = import_rootfs(client, args.from_rootfs, args.tag)
        elif args.dockerfile is not None:
            print(f"building {args.dockerfile / 'Dockerfile'} on {endpoint}", file=sys.stderr, flush=True)
            image_id = build_dockerfile(client, args.dockerfile, args.tag, progress=_say)
        else:
            print(f"assembling python3 + git from this machine for {endpoint}", file=sys.stderr, flush=True)
            image_id, _ = build_sample_image(client, endpoint, args.tag, progress=_say)
    except DockerException as error:
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ImageError(f"the engine at {endpoint} failed: {detail[:300]}") from None
    finally:
        client.close()
    print(f"built {args.tag} ({image_id[:19]}) in {time.monotonic() - started:.1f} s")
    return 0
