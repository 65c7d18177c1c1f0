# Reads Python source on stdin and prints, as JSON, whether it defines a
# top-level main() and any syntax error. Parses only; never runs the source.
import ast, json, sys

src = sys.stdin.buffer.read()
out = {"main_found": False}
try:
    tree = ast.parse(src)
except SyntaxError as e:
    out["syntax_error"] = e.msg
    out["syntax_line"] = e.lineno or 0
except (ValueError, RecursionError, MemoryError) as e:
    out["syntax_error"] = str(e) or type(e).__name__
    out["syntax_line"] = 0
else:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "main":
            out["main_found"] = True
            out["main_async"] = isinstance(node, ast.AsyncFunctionDef)
            out["main_line"] = node.lineno
json.dump(out, sys.stdout)
