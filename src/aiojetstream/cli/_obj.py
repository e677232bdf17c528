"""``aiojetstream obj``: object store buckets and their objects."""

from __future__ import annotations

import asyncio
import os
import secrets
import stat
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TimeRemainingColumn,
)
from rich.text import Text

from aiojetstream import (
    JetStreamContext,
    ObjectInfo,
    ObjectStoreConfig,
    ObjectStoreStatus,
    StorageType,
)

from ._common import (
    BucketMaxBytes,
    BucketReplicas,
    BucketStorage,
    CliError,
    Description,
    Force,
    JsonFlag,
    Output,
    as_written,
    bucket_existed,
    confirm,
    done,
    kv_table,
    list_table,
    note_added,
    output,
    run,
    safe_file_name,
    stdin_usable,
)
from ._messages import DescriptionColumn
from ._units import (
    format_bytes,
    format_duration,
    format_limit,
    format_time,
    parse_chunk_size,
    parse_duration,
)

__all__ = ["ByteRateColumn", "BytesColumn", "app"]

app = typer.Typer(
    help="Object stores: buckets of large objects, stored in chunks.",
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
)

Bucket = Annotated[str, typer.Argument(help="The bucket.", show_default=False)]
_READ_SIZE = 1 << 20


_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")  # format_bytes' units, by power of 1024


class BytesColumn(ProgressColumn):
    """Bytes done and the total, in the binary units of every table and summary (MiB).

    Rich's ``DownloadColumn`` and ``TransferSpeedColumn`` use decimal units
    (MB): a bar said 3.0 MB where the summary under it said 2.9 MiB.
    """

    def render(self, task: Task) -> Text:
        """``1.5/2.9 MiB``, in the total's unit (or what is done, for an unknown total).

        A negative total is unknown too: ``format_bytes`` calls it ``unlimited``.
        """
        if task.total is None or task.total < 0:
            return Text(format_bytes(int(task.completed)), style="progress.download")
        unit = format_bytes(int(task.total)).rpartition(" ")[2]  # the unit tables would use
        if unit == "B":
            shown = f"{int(task.completed)}/{int(task.total)} B"
        else:
            scale = 1024 ** _UNITS.index(unit)
            shown = f"{task.completed / scale:.1f}/{task.total / scale:.1f} {unit}"
        return Text(shown, style="progress.download")


class ByteRateColumn(ProgressColumn):
    """The transfer rate in binary units (``12.3 MiB/s``), as :class:`BytesColumn`."""

    def render(self, task: Task) -> Text:
        """The rate so far (the average once finished); ``?`` until there is one."""
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text("?", style="progress.data.speed")
        return Text(f"{format_bytes(speed)}/s", style="progress.data.speed")


def _transfer_bar(out: Output) -> Progress:
    return Progress(
        DescriptionColumn(),
        BarColumn(bar_width=24),
        BytesColumn(),
        ByteRateColumn(),
        TimeRemainingColumn(),
        console=out.err,
        disable=out.json,
    )


def _status_rows(status: ObjectStoreStatus) -> list[tuple[str, Any]]:
    return [
        ("Bucket", status.bucket),
        ("Description", status.description),
        ("Size", format_bytes(status.size)),
        ("Max bytes", format_limit(status.stream_info.config.max_bytes)),
        ("TTL", format_duration(status.ttl) if status.ttl else "none"),
        ("Storage", str(status.storage)),
        ("Replicas", status.replicas),
        ("Sealed", status.sealed),
        ("Compressed", status.is_compressed),
        ("Backing stream", status.stream_info.config.name),
    ]


def _status_json(status: ObjectStoreStatus) -> dict[str, Any]:
    return {
        "bucket": status.bucket,
        "description": status.description,
        "size": status.size,
        "ttl": status.ttl,
        "storage": str(status.storage),
        "replicas": status.replicas,
        "sealed": status.sealed,
        "is_compressed": status.is_compressed,
    }


def _info_rows(info: ObjectInfo) -> list[tuple[str, Any]]:
    link = info.link
    return [
        ("Name", info.name),
        ("Bucket", info.bucket),
        ("Description", info.description),
        ("Size", f"{format_bytes(info.size)} ({info.size:,} bytes)"),
        ("Chunks", info.chunks),
        ("Modified", format_time(info.mtime)),
        ("Digest", info.digest),
        ("Link", f"{link.bucket}/{link.name or ''}" if link is not None else None),
        ("Headers", info.headers or None),
        ("Metadata", info.metadata or None),
    ]


@app.command("ls")
def ls(
    ctx: typer.Context,
    bucket: Annotated[
        str | None, typer.Argument(help="A bucket: list its objects; none: list the buckets.")
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """List the object store buckets, or the objects in one."""
    out = output(ctx, json_flag)
    if bucket is None:

        async def buckets(js: JetStreamContext) -> list[str]:
            return sorted([name async for name in js.object_store_names()])

        names = run(ctx, buckets)
        if out.json:
            out.emit_json(names)
        elif not names:
            out.note("No object store buckets.")
        for name in names if not out.json else []:
            out.print(name)
        return

    async def objects(js: JetStreamContext) -> list[ObjectInfo]:
        store = await js.object_store(bucket)
        return sorted([info async for info in store.list()], key=lambda i: i.name)

    infos = run(ctx, objects)
    if out.json:
        out.emit_json(infos)
        return
    if not infos:
        out.note(f"No objects in bucket {bucket}.")
        return
    table = list_table(f"Objects in {bucket}")
    table.add_column("Name", overflow="fold", ratio=3)
    table.add_column("Size", justify="right", no_wrap=True)
    table.add_column("Chunks", justify="right", no_wrap=True)
    table.add_column("Modified", no_wrap=True)
    for info in infos:
        name = info.name
        if info.link is not None:
            name += f" -> {info.link.bucket}/{info.link.name or ''}"
        table.add_row(name, format_bytes(info.size), str(info.chunks), format_time(info.mtime))
    out.table(table)


@app.command("add")
def add(
    ctx: typer.Context,
    bucket: Bucket,
    ttl: Annotated[
        timedelta | None,
        typer.Option(parser=parse_duration, metavar="DURATION", help="Objects expire after this."),
    ] = None,
    max_bytes: BucketMaxBytes = None,
    storage: BucketStorage = StorageType.FILE,
    replicas: BucketReplicas = 1,
    compression: Annotated[bool, typer.Option(help="Compress the chunks (s2).")] = False,
    description: Description = None,
    json_flag: JsonFlag = False,
) -> None:
    """Create an object store bucket."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> tuple[bool, ObjectStoreStatus]:
        cfg = ObjectStoreConfig(
            bucket=bucket,
            description=description,
            ttl=ttl,
            max_bytes=-1 if max_bytes is None else max_bytes,
            storage=storage,
            replicas=replicas,
            compression=compression,
        )
        existed = await bucket_existed(js.object_store(bucket))
        with as_written():  # a duration or number out of the server's range: exit 2
            created = await js.create_object_store(cfg)
        return existed, await created.status()

    existed, status = run(ctx, work)
    if out.json:
        out.emit_json(_status_json(status))
        return
    note_added(out, bucket, existed)
    out.table(kv_table(f"Object store {bucket}", _status_rows(status)))


@app.command("info")
def info(
    ctx: typer.Context,
    bucket: Bucket,
    name: Annotated[
        str | None, typer.Argument(help="An object; none: the bucket's status.")
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Show a bucket's status, or an object's info."""
    out = output(ctx, json_flag)

    async def work(js: JetStreamContext) -> ObjectStoreStatus | ObjectInfo:
        store = await js.object_store(bucket)
        return await (store.status() if name is None else store.info(name))

    result = run(ctx, work)
    if isinstance(result, ObjectStoreStatus):
        if out.json:
            out.emit_json(_status_json(result))
        else:
            out.table(kv_table(f"Object store {bucket}", _status_rows(result)))
    elif out.json:
        out.emit_json(result)
    else:
        out.table(kv_table(f"Object {result.name}", _info_rows(result)))


async def _pieces(source: IO[bytes], progress: Progress, task: Any) -> AsyncIterator[bytes]:
    while True:
        piece = await asyncio.to_thread(source.read, _READ_SIZE)
        if not piece:
            return
        progress.advance(task, len(piece))
        yield piece


@app.command("put")
def put(
    ctx: typer.Context,
    bucket: Bucket,
    file: Annotated[Path, typer.Argument(help="The file to store; '-' reads standard input.")],
    name: Annotated[
        str | None, typer.Option("--name", help="The object's name (default: the file's name).")
    ] = None,
    description: Description = None,
    chunk_size: Annotated[
        int | None,
        typer.Option(
            parser=parse_chunk_size, metavar="SIZE", help="Bytes per chunk (default 128KiB)."
        ),
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Store a file as an object (replacing any object of that name), with a progress bar."""
    out = output(ctx, json_flag)
    from_stdin = str(file) == "-"
    if from_stdin and name is None:
        raise typer.BadParameter("reading standard input needs --name")
    if from_stdin:
        stdin_usable("'-'")
    object_name = name if name is not None else file.name

    async def work(js: JetStreamContext) -> ObjectInfo:
        store = await js.object_store(bucket)
        source: IO[bytes]
        if from_stdin:
            source, total = sys.stdin.buffer, None
        else:
            source = await asyncio.to_thread(file.open, "rb")
            total = (await asyncio.to_thread(os.fstat, source.fileno())).st_size
        try:
            with _transfer_bar(out) as progress:
                task = progress.add_task(f"Storing {object_name}", total=total)
                return await store.put(
                    object_name,
                    _pieces(source, progress, task),
                    description=description,
                    chunk_size=chunk_size,
                )
        finally:
            if not from_stdin:
                await asyncio.to_thread(source.close)

    result = run(ctx, work)
    if out.json:
        out.emit_json(result)
    else:
        out.print(
            f"Stored {result.name} in {bucket}: {format_bytes(result.size)} in "
            f"{result.chunks} chunk{'' if result.chunks == 1 else 's'}, {result.digest}."
        )


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.remove(path)


def _target(output_path: Path | None, name: str) -> Path:
    """Where ``obj get`` writes: ``--output``, inside it if it is a directory, else ``./NAME``.

    ``NAME`` stands for the object name's last path part (``notes/a.txt``: ``a.txt``),
    with control and format characters (ESC, U+202E, ...) and tabs as ``_``.
    """
    last = safe_file_name(Path(name).name)
    own = Path(last if last not in ("", ".", "..") else "object")
    if output_path is None:
        return own
    return output_path / own if output_path.is_dir() else output_path


_CREATE_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_BINARY", 0)
)


def _open_part(target: Path) -> tuple[int, str]:
    """A new file beside ``target`` to download into, and its path.

    Created as a new file is (``0o666`` less the umask: not ``mkstemp``'s ``0o600``);
    when ``target`` exists (``--force``), with its permissions.

    Raises:
        OSError: it can not be created; named after ``target``, not the part file.

    """
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    for _ in range(100):
        part = target.parent / f".{target.name}.{secrets.token_hex(4)}.part"
        try:
            fd = os.open(part, _CREATE_FLAGS, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise type(exc)(exc.errno, exc.strerror, str(target)) from exc
        if mode is not None:
            try:
                os.fchmod(fd, mode)
            except BaseException:
                os.close(fd)
                os.remove(part)
                raise
        return fd, str(part)
    raise FileExistsError(f"{target}: no free name for a temporary file beside it")


@app.command("get")
def get(
    ctx: typer.Context,
    bucket: Bucket,
    name: Annotated[str, typer.Argument(help="The object.", show_default=False)],
    output_path: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write it: a file, or a directory (DIR/NAME); '-': standard output "
            "(default: ./NAME, NAME being the object name's last part).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Overwrite an existing file.")
    ] = False,
    json_flag: JsonFlag = False,
) -> None:
    """Fetch an object (its size and SHA-256 digest are checked), with a progress bar."""
    out = output(ctx, json_flag)
    to_stdout = output_path is not None and str(output_path) == "-"
    if to_stdout and out.json:
        raise typer.BadParameter("--json and --output - both want standard output")
    target = Path("-") if to_stdout else _target(output_path, name)

    async def work(js: JetStreamContext) -> ObjectInfo:
        # Checked before anything is fetched.
        if not to_stdout and await asyncio.to_thread(target.is_dir):
            raise CliError(f"{target} is a directory")
        if not to_stdout and not force and await asyncio.to_thread(target.exists):
            raise CliError(f"{target} exists (use --force to overwrite it)")
        if not to_stdout and not await asyncio.to_thread(target.parent.is_dir):
            raise CliError(f"{target.parent}: no such directory")
        store = await js.object_store(bucket)
        async with await store.get(name) as result:
            if to_stdout:
                with _transfer_bar(out) as progress:
                    task = progress.add_task(f"Fetching {name}", total=result.info.size)
                    async for chunk in result:
                        sys.stdout.buffer.write(chunk)
                        progress.advance(task, len(chunk))
                sys.stdout.buffer.flush()
                return result.info
            fd, tmp = await asyncio.to_thread(_open_part, target)
            try:
                with os.fdopen(fd, "wb") as f, _transfer_bar(out) as progress:
                    task = progress.add_task(f"Fetching {name}", total=result.info.size)
                    async for chunk in result:
                        await asyncio.to_thread(f.write, chunk)
                        progress.advance(task, len(chunk))
                await asyncio.to_thread(os.replace, tmp, target)
            except BaseException:
                await asyncio.to_thread(_remove, tmp)
                raise
            return result.info

    result = run(ctx, work)
    if out.json:
        out.emit_json({**result.model_dump(mode="json", exclude_none=True), "file": str(target)})
    elif not to_stdout:
        out.note(f"Wrote {name} ({format_bytes(result.size)}) to {target}.")


@app.command("rm")
def rm(
    ctx: typer.Context,
    bucket: Bucket,
    name: Annotated[
        str | None, typer.Argument(help="The object; none: delete the whole bucket.")
    ] = None,
    force: Force = False,
    json_flag: JsonFlag = False,
) -> None:
    """Delete an object, or (without NAME) the whole bucket."""
    out = output(ctx, json_flag)
    if name is None:
        confirm(f"Delete object store {bucket} and all its objects?", force)
    else:
        confirm(f"Delete object {name} from {bucket}?", force)

    async def work(js: JetStreamContext) -> None:
        if name is None:
            await js.delete_object_store(bucket)
        else:
            await (await js.object_store(bucket)).delete(name)

    run(ctx, work)
    record: dict[str, Any] = {"bucket": bucket, "deleted": True}
    if name is not None:
        record = {"bucket": bucket, "name": name, "deleted": True}
    done(out, record, f"Deleted {bucket if name is None else name}.")
