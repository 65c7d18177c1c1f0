# The GaaS job runner: imports the buyer's script and calls its main().
# Runs inside the sandbox. Exit codes: 0 main() returned, 1 it raised (the
# traceback is on stderr), NO_MAIN when there is no main() to call, or the
# code the script passed to sys.exit().
# Only cheap modules at the top: every job pays for these imports.
import importlib.util, os, sys

NO_MAIN = 119


def run(path):
    sys.path.insert(0, os.path.dirname(path))
    packages = os.environ.get("GAAS_PACKAGES")
    if packages and os.path.isdir(packages):
        sys.path.insert(0, packages)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    main = getattr(module, "main", None)
    if not callable(main):
        print("gaas: the script defines no main() function", file=sys.stderr)
        return NO_MAIN
    result = main()
    if hasattr(result, "__await__"):  # async def main()
        import asyncio
        asyncio.run(result)
    return 0


if __name__ == "__main__":
    try:
        code = run(sys.argv[1])
    except SystemExit as e:
        if e.code is None or e.code == 0:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:
        import traceback
        # Leave the runner's own frames out: the buyer's script starts the story.
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
