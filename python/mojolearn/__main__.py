"""python -m mojolearn conformance | quality | drift | profile ...  (see each tool)."""
import sys


def _main() -> int:
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m mojolearn conformance [--golden FILE] [--export FILE] "
              "[--sabotage] [--quiet] [--every-isa]\n       python -m mojolearn conformance diff A.json B.json\n"
              "       python -m mojolearn quality MODEL --profile fixed15_v1 --builtin prose ...\n"
              "       python -m mojolearn drift MODEL --mode fast ...\n"
              "       python -m mojolearn profile MODEL [--tokens N] [--decode N] [--torch]")
        return 0 if args else 2
    if args[0] == "conformance":
        from ._tools.conformance import main

        return main(args[1:])
    if args[0] == "quality":
        from ._tools.quality import main

        return main(args[1:])
    if args[0] == "drift":
        from ._tools.drift import main

        return main(args[1:])
    if args[0] == "profile":
        from ._tools.profile import main

        return main(args[1:])
    print(f"mojolearn: unknown command {args[0]!r}; commands: conformance, quality, drift, "
          f"profile",
          file=sys.stderr)
    return 2


sys.exit(_main())
