//! Whether the handler itself can use what would be stripped.
//!
//! Two checks, both conservative (a doubt keeps the component whole):
//!
//! 1. **Names.** Any function of std's user-facing stdio (`std::io::stdio`:
//!    `println!`, `eprintln!`, `stdout()`...), environment (`std::env`) or
//!    `std::process::exit`. These survive inlining as at least one named
//!    function: a buffered writer, a `fmt::Write` adapter in a vtable, a lazy
//!    static's initializer.
//! 2. **Reachability.** A breadth-first walk over direct calls from every
//!    export and every function in the indirect-call table, which does not
//!    enter std's panic machinery (the path these imports exist for). If it
//!    reaches a stripped import, the handler calls it outside a panic. A
//!    module without a name section cannot be told apart, so it is refused.

use std::collections::{HashMap, HashSet, VecDeque};

use wasmparser::{ElementItems, ExternalKind, KnownCustom, Name, Operator, Parser, Payload};

use crate::error::SlimError;
use crate::imports::FuncImport;

/// Functions that show the handler uses stdio, the environment or exit.
const USER_FACING: &[&str] = &["std::io::stdio::", "std::env::", "std::process::exit"];

/// Std's panic and allocation-failure machinery: what the stripped imports are
/// linked for. The walk does not enter these functions. `fmt::Write` adapters
/// over std's raw stdio are only created by the raw handles' `write_fmt`,
/// which is itself caught if the handler reaches it.
const PANIC_PATH: &[&str] = &[
    "std::panicking::",
    "<std::panicking::",
    "core::panicking::",
    "std::panic::get_backtrace_style",
    "std::sys::backtrace::",
    "__rustc::rust_begin_unwind",
    "__rustc::__rust_start_panic",
    "__rustc::rust_panic",
    "rust_begin_unwind",
    "rust_panic",
    "std::alloc::default_alloc_error_hook",
    "std::alloc::rust_oom",
    "__rustc::__rg_oom",
    "__rustc::__rdl_oom",
    "std::process::abort",
    "<std::io::default_write_fmt::Adapter<std::sys::stdio::",
];

/// wasi-libc's callbacks for the stdio descriptors (fds 0-2): in the table
/// because its descriptor table calls them through pointers. They run only
/// when a file-descriptor function below is called on a stdio descriptor, so
/// they are not walk roots; reaching one of those functions counts as a use.
const STDIO_DESCRIPTOR_CALLBACKS: &str = "stdio_";

/// wasi-libc's file-descriptor functions (exact names): the way into the
/// stdio descriptor callbacks. Reaching one outside the panic path refuses.
const FD_FUNCTIONS: &[&str] = &[
    "write",
    "writev",
    "pwrite",
    "read",
    "readv",
    "pread",
    "close",
    "fstat",
    "fcntl",
    "isatty",
    "__isatty",
    "ioctl",
    "lseek",
    "poll",
    "fsync",
    "fdatasync",
    "ftruncate",
];

/// Refuses a module whose own code can reach a stripped import.
pub(crate) fn check(module: &[u8], imports: &[FuncImport]) -> Result<(), SlimError> {
    let graph = CallGraph::parse(module)?;
    if let Some(function) = graph
        .names
        .values()
        .find(|name| USER_FACING.iter().any(|m| name.contains(m)))
    {
        return Err(SlimError::UsesStdio {
            function: function.clone(),
            import: None,
        });
    }
    if graph.names.is_empty() {
        return Err(SlimError::UsesStdio {
            function: "the module has no name section, so its use cannot be checked".into(),
            import: None,
        });
    }
    let on_panic_path = |f: u32| {
        graph
            .names
            .get(&f)
            .is_some_and(|n| PANIC_PATH.iter().any(|p| n.starts_with(p)))
    };
    let mut parent: HashMap<u32, u32> = HashMap::new();
    let mut seen: HashSet<u32> = HashSet::new();
    let mut queue: VecDeque<u32> = VecDeque::new();
    let is_descriptor_callback = |f: u32| {
        graph
            .names
            .get(&f)
            .is_some_and(|n| n.starts_with(STDIO_DESCRIPTOR_CALLBACKS))
    };
    let table_roots = graph.table.iter().filter(|&&f| !is_descriptor_callback(f));
    for &root in graph.roots.iter().chain(table_roots) {
        if !on_panic_path(root) && seen.insert(root) {
            queue.push_back(root);
        }
    }
    while let Some(f) = queue.pop_front() {
        if graph
            .names
            .get(&f)
            .is_some_and(|n| FD_FUNCTIONS.contains(&n.as_str()))
        {
            return Err(SlimError::UsesStdio {
                function: graph.chain(&parent, f),
                import: Some(format!("the file-descriptor function `{}`", graph.name(f))),
            });
        }
        if let Some(import) = imports.get(f as usize) {
            if import.strip {
                return Err(SlimError::UsesStdio {
                    function: graph.chain(&parent, f),
                    import: Some(import.label()),
                });
            }
            continue;
        }
        let Some(callees) = graph.calls.get(f as usize - imports.len()) else {
            continue;
        };
        for &callee in callees {
            if !on_panic_path(callee) && seen.insert(callee) {
                parent.insert(callee, f);
                queue.push_back(callee);
            }
        }
    }
    Ok(())
}

struct CallGraph {
    /// Demangled names (without hashes) by function index.
    names: HashMap<u32, String>,
    /// Exported functions and the start function.
    roots: Vec<u32>,
    /// Functions placed in tables (reachable by indirect calls).
    table: Vec<u32>,
    /// Direct callees of each defined function, by defined index.
    calls: Vec<Vec<u32>>,
}

impl CallGraph {
    fn parse(module: &[u8]) -> Result<Self, SlimError> {
        let mut graph = CallGraph {
            names: HashMap::new(),
            roots: Vec::new(),
            table: Vec::new(),
            calls: Vec::new(),
        };
        for payload in Parser::new(0).parse_all(module) {
            match payload? {
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export?;
                        if export.kind == ExternalKind::Func {
                            graph.roots.push(export.index);
                        }
                    }
                }
                Payload::StartSection { func, .. } => graph.roots.push(func),
                Payload::ElementSection(reader) => {
                    for element in reader {
                        graph.add_element_items(element?.items)?;
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let mut callees = Vec::new();
                    let mut ops = body.get_operators_reader()?;
                    while !ops.eof() {
                        match ops.read()? {
                            Operator::Call { function_index }
                            | Operator::ReturnCall { function_index } => {
                                callees.push(function_index)
                            }
                            Operator::RefFunc { function_index } => {
                                graph.table.push(function_index)
                            }
                            _ => {}
                        }
                    }
                    graph.calls.push(callees);
                }
                Payload::CustomSection(section) => {
                    if let KnownCustom::Name(reader) = section.as_known() {
                        for name in reader {
                            if let Name::Function(map) = name? {
                                for naming in map {
                                    let naming = naming?;
                                    let demangled =
                                        format!("{:#}", rustc_demangle::demangle(naming.name));
                                    graph.names.insert(naming.index, demangled);
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(graph)
    }

    fn add_element_items(&mut self, items: ElementItems<'_>) -> Result<(), SlimError> {
        match items {
            ElementItems::Functions(funcs) => {
                for func in funcs {
                    self.table.push(func?);
                }
            }
            ElementItems::Expressions(_, exprs) => {
                for expr in exprs {
                    let mut ops = expr?.get_operators_reader();
                    while !ops.eof() {
                        if let Operator::RefFunc { function_index } = ops.read()? {
                            self.table.push(function_index);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// `root -> ... -> caller` of `f`, from the walk's parent links.
    fn chain(&self, parent: &HashMap<u32, u32>, f: u32) -> String {
        let mut path = Vec::new();
        let mut at = f;
        while let Some(&caller) = parent.get(&at) {
            path.push(self.name(caller));
            at = caller;
            if path.len() > 64 {
                break;
            }
        }
        if path.is_empty() {
            path.push(self.name(f));
        }
        path.reverse();
        path.join(" -> ")
    }

    fn name(&self, f: u32) -> String {
        self.names
            .get(&f)
            .cloned()
            .unwrap_or_else(|| format!("function {f}"))
    }
}

#[cfg(test)]
mod tests {
    use wasm_encoder::{
        CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection,
        ImportSection, Module, NameMap, NameSection, TypeSection,
    };

    use super::*;
    use crate::imports::classify;

    /// A module importing `wasi:cli/stdout#get-stdout` (function 0), whose
    /// defined functions (named `names`, indices from 1) call the callees
    /// listed in `calls`; the first defined function is exported as `handle`.
    fn module(names: &[&str], calls: &[&[u32]], with_names: bool) -> (Vec<u8>, Vec<FuncImport>) {
        let mut types = TypeSection::new();
        types.ty().function([], []);
        let mut imports = ImportSection::new();
        imports.import(
            "wasi:cli/stdout@0.2.0",
            "get-stdout",
            EntityType::Function(0),
        );
        let mut functions = FunctionSection::new();
        let mut code = CodeSection::new();
        for callees in calls {
            functions.function(0);
            let mut body = Function::new([]);
            let mut ins = body.instructions();
            for &callee in *callees {
                ins.call(callee);
            }
            ins.end();
            code.function(&body);
        }
        let mut exports = ExportSection::new();
        exports.export("handle", ExportKind::Func, 1);
        let mut module = Module::new();
        module
            .section(&types)
            .section(&imports)
            .section(&functions)
            .section(&exports)
            .section(&code);
        if with_names {
            let mut map = NameMap::new();
            map.append(0, "__wasm_import_stdout_get_stdout");
            for (i, name) in names.iter().enumerate() {
                map.append(u32::try_from(i).unwrap_or(0) + 1, name);
            }
            let mut section = NameSection::new();
            section.functions(&map);
            module.section(&section);
        }
        let import = classify("wasi:cli/stdout@0.2.0", "get-stdout", 0).expect("strippable");
        (module.finish(), vec![import])
    }

    #[test]
    fn a_direct_call_to_a_stripped_import_is_refused_with_its_path() {
        let (bytes, imports) = module(&["handle", "my_print"], &[&[2], &[0]], true);
        let err = check(&bytes, &imports).expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("handle -> my_print"), "{text}");
        assert!(text.contains("wasi:cli/stdout@0.2.0#get-stdout"), "{text}");
    }

    #[test]
    fn a_call_only_through_the_panic_machinery_is_allowed() {
        let (bytes, imports) = module(
            &[
                "handle",
                "core::panicking::panic_fmt",
                "std::panicking::default_hook",
            ],
            &[&[2], &[3], &[0]],
            true,
        );
        check(&bytes, &imports).expect("the panic path does not count");
    }

    #[test]
    fn reaching_a_file_descriptor_function_is_refused() {
        let (bytes, imports) = module(&["handle", "write"], &[&[2], &[]], true);
        let err = check(&bytes, &imports).expect_err("refused");
        assert!(
            err.to_string().contains("file-descriptor function `write`"),
            "{err}"
        );
    }

    #[test]
    fn a_user_facing_stdio_function_is_refused_even_if_unreachable() {
        let (bytes, imports) = module(&["handle", "std::io::stdio::_print"], &[&[], &[]], true);
        let err = check(&bytes, &imports).expect_err("refused");
        assert!(err.to_string().contains("std::io::stdio::_print"), "{err}");
    }

    #[test]
    fn a_module_without_names_is_refused() {
        let (bytes, imports) = module(&["handle"], &[&[]], false);
        let err = check(&bytes, &imports).expect_err("refused");
        assert!(err.to_string().contains("no name section"), "{err}");
    }
}
