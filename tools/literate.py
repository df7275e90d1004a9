"""The literate pipeline: chapters/*.md -> transformer/*.py and book/*.ipynb.

    python tools/literate.py export [--check]      # transformer/*.py
    python tools/literate.py notebooks [NAME ...]  # book/NAME.ipynb, unexecuted
    python tools/literate.py execute [NAME ...]    # run them in place (cwd book/)
    python tools/literate.py refresh [NAME ...]    # prose/tag edits, outputs kept
    python tools/literate.py check                 # all in-step checks, no writes

The work lives in three short modules: `literate_source.py` (reading
chapters and directives), `literate_export.py` (the package) and
`literate_notebooks.py` (notebooks, execution record, status page).
`tests/test_pipeline.py` calls the same functions, so `pytest` fails when a
generated file is stale and says which command regenerates it.
"""
from __future__ import annotations

import sys

from literate_export import (constant_names, expected_package, export,
                             exported_names, package_problems, public_names,
                             render_init, render_module)
from literate_notebooks import (execute, generate, kernel_env,
                                notebook_problems, refresh,
                                status_problems)
from literate_source import (Chapter, Paths, chapter_definition,
                             chapter_paths, directives, parse_chapter,
                             read_chapter)
from tool_cli import parser as tool_parser

__all__ = [  # what tests, tools and conftest.py use through this module
    "Chapter", "Paths", "chapter_definition", "chapter_paths",
    "constant_names", "directives", "execute", "expected_package", "export",
    "exported_names", "generate", "kernel_env", "notebook_problems",
    "package_problems", "parse_chapter", "public_names", "read_chapter",
    "refresh", "render_init", "render_module", "status_problems"]


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser(__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("export", help="chapters -> transformer/*.py")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if transformer/ is stale")
    for cmd in ("notebooks", "execute"):
        p = sub.add_parser(cmd)
        p.add_argument("names", nargs="*", help="chapter names (default all)")
    p = sub.add_parser("refresh", help="carry prose and tag edits into "
                       "executed notebooks whose code is unchanged")
    p.add_argument("names", nargs="*", help="chapter names (default all)")
    sub.add_parser("check", help="every in-step check; exit 1 on a problem")
    args = parser.parse_args(argv)
    if args.cmd == "export":
        return export(check=args.check)
    if args.cmd == "notebooks":
        generate(args.names)
    elif args.cmd == "execute":
        execute(args.names)
    elif args.cmd == "refresh":
        return 1 if refresh(args.names) else 0
    elif args.cmd == "check":
        problems = (package_problems() + notebook_problems()
                    + status_problems())
        print("\n".join(problems) or "chapters, notebooks and package agree")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
