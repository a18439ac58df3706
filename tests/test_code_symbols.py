"""cuba_memorys.code.symbols and .languages (issue 19): per language, the symbols a file defines
(kind, qualified name, span, signature), the calls each makes (calls inside a nested named
definition belong to it, not its parent), the imports, and span hashes that survive whitespace.
Real tree-sitter grammars from the PyPI wheels; no repository needed here.
"""

from __future__ import annotations

import pytest

from cuba_memorys.code.languages import LANGUAGES, language_for, parser_for
from cuba_memorys.code.spans import lines_of, span_hash
from cuba_memorys.code.symbols import Symbol, find_symbol, parse_file
from cuba_memorys.errors import CodeAnchorError


def table(symbols: list[Symbol]) -> dict[str, tuple[str, int, int]]:
    return {s.qualified: (s.kind, s.line_start, s.line_end) for s in symbols}


def by_name(symbols: list[Symbol]) -> dict[str, Symbol]:
    return {s.qualified: s for s in symbols}


PYTHON = '''\
import os, json as j
from pkg.util import helper
from . import sibling


@register("x")
class Config(Base):
    LIMIT = compute()

    def load(self, path):
        data = read(path)
        return self.parse(data)

    @staticmethod
    def parse(text):
        def clean(line):
            return strip_comment(line)
        return [clean(x) for x in text.split()] + list(map(lambda v: convert(v), text))


def main():
    Config().load(os.path.join("a", "b"))
'''


def test_python_symbols_calls_and_imports():
    symbols, imports = parse_file("pkg/config.py", PYTHON, "python")
    assert table(symbols) == {
        "pkg/config.py::Config": ("class", 6, 18),  # the decorator is part of the span
        "pkg/config.py::Config::load": ("method", 10, 12),
        "pkg/config.py::Config::parse": ("method", 14, 18),
        "pkg/config.py::Config::parse::clean": ("function", 16, 17),
        "pkg/config.py::main": ("function", 21, 22),
    }
    named = by_name(symbols)
    assert named["pkg/config.py::Config"].signature == "class Config(Base):"
    assert named["pkg/config.py::Config"].calls == ("register", "compute")
    assert named["pkg/config.py::Config::load"].calls == ("read", "parse")
    # clean() is a nested definition: its call is its own; the lambda's call is parse's
    assert named["pkg/config.py::Config::parse"].calls == ("clean", "split", "list", "map", "convert")
    assert named["pkg/config.py::Config::parse::clean"].calls == ("strip_comment",)
    assert named["pkg/config.py::main"].calls == ("load", "Config", "join")
    assert named["pkg/config.py::main"].simple == "main" and named["pkg/config.py::main"].path == "pkg/config.py"
    assert [(i.module, i.line) for i in imports] == [("os", 1), ("json", 1), ("pkg.util", 2), (".", 3)]


TYPESCRIPT = '''\
import { readFile } from "fs/promises";
import type { Options } from './options';

export interface Parsed { keys: string[] }
export type Key = string;
enum Mode { Strict, Loose }

export function parseConfig(text: string): Parsed {
  return { keys: text.split(",").map((k) => normalise(k)) };
}

export const loadConfig = async (path: string) => parseConfig(await readFile(path, "utf8"));

export class Loader extends Base {
  private cache = new Map<string, Parsed>();
  load(path: string) {
    function inner() { return hidden(); }
    return this.fetch(path);
  }
  handle = (e: Event) => report(e);
}
'''


def test_typescript_symbols_calls_and_imports():
    symbols, imports = parse_file("src/config.ts", TYPESCRIPT, "typescript")
    assert table(symbols) == {
        "src/config.ts::Parsed": ("interface", 4, 4),
        "src/config.ts::Key": ("type", 5, 5),
        "src/config.ts::Mode": ("enum", 6, 6),
        "src/config.ts::parseConfig": ("function", 8, 10),
        "src/config.ts::loadConfig": ("function", 12, 12),
        "src/config.ts::Loader": ("class", 14, 21),
        "src/config.ts::Loader::load": ("method", 16, 19),
        "src/config.ts::Loader::load::inner": ("function", 17, 17),
        "src/config.ts::Loader::handle": ("method", 20, 20),
    }
    named = by_name(symbols)
    assert named["src/config.ts::parseConfig"].calls == ("map", "split", "normalise")
    assert named["src/config.ts::parseConfig"].signature == "export function parseConfig(text: string): Parsed {"
    assert named["src/config.ts::loadConfig"].calls == ("parseConfig", "readFile")
    assert named["src/config.ts::Loader"].calls == ("Map",)  # `new` counts as a call of the class
    assert named["src/config.ts::Loader::load"].calls == ("fetch",)
    assert named["src/config.ts::Loader::load::inner"].calls == ("hidden",)
    assert named["src/config.ts::Loader::handle"].calls == ("report",)
    assert [(i.module, i.line) for i in imports] == [("fs/promises", 1), ("./options", 2)]


def test_javascript_and_tsx():
    js = ("import x from 'lib';\nexport { y } from \"./y.js\";\n"
          "const a = function () { w(); }, b = 2;\nfunction* gen() { yield step(); }\n"
          "class C { #secret() { s(); } static build() { return new C(); } }\n")
    symbols, imports = parse_file("a.js", js, "javascript")
    assert table(symbols) == {"a.js::a": ("function", 3, 3), "a.js::gen": ("function", 4, 4),
                              "a.js::C": ("class", 5, 5), "a.js::C::#secret": ("method", 5, 5),
                              "a.js::C::build": ("method", 5, 5)}
    assert by_name(symbols)["a.js::C::build"].calls == ("C",)
    assert [i.module for i in imports] == ["lib", "./y.js"]
    tsx = ("export function Button(props: Props) {\n"
           "  return <button onClick={() => press()}>{label(props)}</button>;\n}\n")
    symbols, _ = parse_file("ui/Button.tsx", tsx, "tsx")
    assert table(symbols) == {"ui/Button.tsx::Button": ("function", 1, 3)}
    assert symbols[0].calls == ("press", "label")


GO = '''\
package store

import (
\t"fmt"
\tdb "database/sql"
)

type Store struct {
\tconn *db.DB
}

type Reader interface {
\tRead() error
}

type ID = int64

func New(conn *db.DB) *Store {
\treturn &Store{conn: conn}
}

func (s *Store) Save(v string) error {
\tgo func() { background() }()
\treturn fmt.Errorf("save %s: %w", v, s.conn.Ping())
}
'''


def test_go_symbols_with_receiver_calls_and_imports():
    symbols, imports = parse_file("store/store.go", GO, "go")
    assert table(symbols) == {
        "store/store.go::Store": ("struct", 8, 10),
        "store/store.go::Reader": ("interface", 12, 14),
        "store/store.go::ID": ("type", 16, 16),
        "store/store.go::New": ("function", 18, 20),
        "store/store.go::Store::Save": ("method", 22, 25),  # the receiver's type qualifies it
    }
    save = by_name(symbols)["store/store.go::Store::Save"]
    assert save.simple == "Save" and save.signature == "func (s *Store) Save(v string) error {"
    assert save.calls == ("background", "Errorf", "Ping")  # an anonymous func is not a definition
    assert [(i.module, i.line) for i in imports] == [("fmt", 4), ("database/sql", 5)]
    assert find_symbol(symbols, "Store.Save") is save
    assert find_symbol(symbols, "Store::Save") is save


RUST = '''\
use std::collections::HashMap;
use crate::{config, util::trim};

pub struct Cache { map: HashMap<String, u32> }

pub enum Mode { Fast, Safe }

pub trait Store {
    fn get(&self, key: &str) -> Option<u32>;
    fn has(&self, key: &str) -> bool { self.get(key).is_some() }
}

impl<T> Wrapper<T> {
    pub fn new() -> Self { Self::build(HashMap::new()) }
}

impl Store for crate::Cache {
    fn get(&self, key: &str) -> Option<u32> {
        fn helper() { hidden(); }
        self.map.get(&trim(key)).copied()
    }
}

mod tests {
    fn it_works() { assert_eq!(parse::<u8>("1"), 1); }
}
'''


def test_rust_symbols_impl_methods_calls_and_uses():
    symbols, imports = parse_file("src/cache.rs", RUST, "rust")
    assert table(symbols) == {
        "src/cache.rs::Cache": ("struct", 4, 4),
        "src/cache.rs::Mode": ("enum", 6, 6),
        "src/cache.rs::Store": ("trait", 8, 11),
        "src/cache.rs::Store::get": ("method", 9, 9),
        "src/cache.rs::Store::has": ("method", 10, 10),
        "src/cache.rs::Wrapper::new": ("method", 14, 14),
        "src/cache.rs::Cache::get": ("method", 18, 21),
        "src/cache.rs::Cache::get::helper": ("function", 19, 19),
        "src/cache.rs::tests::it_works": ("function", 25, 25),
    }
    named = by_name(symbols)
    assert named["src/cache.rs::Wrapper::new"].calls == ("build", "new")
    assert named["src/cache.rs::Cache::get"].calls == ("copied", "get", "trim")
    assert named["src/cache.rs::Cache::get::helper"].calls == ("hidden",)
    assert named["src/cache.rs::Store::has"].calls == ("is_some", "get")
    assert [(i.module, i.line) for i in imports] == [("std::collections::HashMap", 1),
                                                      ("crate::{config, util::trim}", 2)]
    # two `get`s: the simple name is ambiguous, the qualified and Type::name forms are not
    assert find_symbol(symbols, "get") is None
    assert find_symbol(symbols, "Cache::get") is named["src/cache.rs::Cache::get"]
    assert find_symbol(symbols, "src/cache.rs::Store::get") is named["src/cache.rs::Store::get"]
    assert find_symbol(symbols, "it_works") is named["src/cache.rs::tests::it_works"]
    assert find_symbol(symbols, "absent") is None


def test_spans_hash_their_lines_and_survive_reindentation():
    symbols, _ = parse_file("m.py", PYTHON, "python")
    load = by_name(symbols)["m.py::Config::load"]
    assert load.span_hash == span_hash(lines_of(PYTHON, load.line_start, load.line_end))
    # the same method moved to top level (dedented), with trailing spaces: the same hash
    moved = "def load(self, path):   \n    data = read(path)\n    return self.parse(data)\n"
    (top,), _ = parse_file("m.py", moved, "python")
    assert top.span_hash == load.span_hash and top.kind == "function"
    edited = moved.replace("read(path)", "read(path, strict=True)")
    (changed,), _ = parse_file("m.py", edited, "python")
    assert changed.span_hash != load.span_hash


def test_redefinitions_get_distinct_names_and_broken_code_still_parses():
    source = "def f():\n    pass\n\ndef f():\n    return 2\n"
    symbols, _ = parse_file("r.py", source, "python")
    assert [s.qualified for s in symbols] == ["r.py::f", "r.py::f#2"]
    broken = "def good():\n    return ok()\n\ndef bad(:\n    ???\n"
    symbols, _ = parse_file("b.py", broken, "python")
    assert "b.py::good" in table(symbols)
    assert parse_file("e.py", "", "python") == ([], [])


def test_languages_by_suffix_and_bad_names():
    assert [language_for(p) for p in ("a.py", "b.mjs", "c.ts", "d.d.ts", "e.tsx", "f.go", "g.rs", "h.txt", "Makefile")
            ] == ["python", "javascript", "typescript", "typescript", "tsx", "go", "rust", None, None]
    assert set(LANGUAGES) == {"python", "javascript", "typescript", "tsx", "go", "rust"}
    for language in LANGUAGES:
        assert parser_for(language) is parser_for(language)  # made once per thread
    with pytest.raises(CodeAnchorError, match="unknown language 'cobol'"):
        parser_for("cobol")
    with pytest.raises(CodeAnchorError, match="Known: python"):
        parse_file("x.cob", "", "cobol")


# -- deep trees (review finding 6): the walk keeps its own stack, it never recurses ---------
def test_a_3000_term_expression_is_walked_without_recursion_error():
    sum_of_ones = "X = " + "+".join(["1"] * 3000) + "\n"
    source = "def before():\n    return 1\n\n\n" + sum_of_ones + "\n\ndef after():\n    return helper()\n"
    symbols, _ = parse_file("deep.py", source, "python")
    assert table(symbols) == {"deep.py::before": ("function", 1, 2), "deep.py::after": ("function", 8, 9)}
    assert by_name(symbols)["deep.py::after"].calls == ("helper",)


@pytest.mark.parametrize("language, source", [
    ("python", "def outer():\n    return " + "[" * 500 + "call()" + "]" * 500 + "\n"),
    ("javascript", "function outer() {\n  return " + "[" * 500 + "call()" + "]" * 500 + ";\n}\n"),
    ("rust", "fn outer() -> i32 {\n    " + "(" * 500 + "call()" + ")" * 500 + "\n}\n"),
])
def test_500_deep_nesting_still_credits_the_call_to_its_function(language, source):
    symbols, _ = parse_file("deep", source, language)
    assert [(s.simple, s.calls) for s in symbols] == [("outer", ("call",))]


def test_nested_definitions_500_deep_are_each_a_symbol_in_source_order():
    source = "".join("    " * n + f"def f{n}():\n" for n in range(500)) + "    " * 500 + "return g()\n"
    symbols, _ = parse_file("deep.py", source, "python")
    assert len(symbols) == 500
    assert [s.simple for s in symbols[:3]] == ["f0", "f1", "f2"]
    assert symbols[-1].qualified == "deep.py::" + "::".join(f"f{n}" for n in range(500))
    assert symbols[-1].calls == ("g",) and symbols[0].calls == ()
    assert (symbols[0].line_start, symbols[0].line_end) == (1, 501)
