"""Where a LeRobot policy's tokenizer files are: LeRobot names them by hub id, which cannot be
resolved offline, so files inside the checkpoint take precedence."""

from __future__ import annotations

from pathlib import Path

from vla_server.model.tokenizer import has_tokenizer_files


def tokenizer_folder(folder: Path, named: str, subfolder: str | None = None) -> Path:
    """`folder` (or its `subfolder`) when it holds tokenizer files, else `named` as a local
    folder (absolute or inside `folder`); anything else is an error naming it."""
    own = folder / subfolder if subfolder else folder
    if has_tokenizer_files(own):
        return own
    for candidate in (Path(named), folder / named):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"{own} holds no tokenizer files and {named!r} is not a local folder (hub ids are not "
        "downloaded: put the tokenizer files into the checkpoint folder)"
    )
