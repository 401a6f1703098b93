//! Rewrites the core module: each stripped import becomes a local function.
//!
//! Function indices: imports come first in the index space, so removing `k`
//! of `n` imports would shift every defined function down by `k`. Instead the
//! `k` stubs are placed *first* among the defined functions: kept imports take
//! indices `0..n-k`, the stubs `n-k..n`, and every original defined function
//! keeps its index. Only references to imports are renumbered.

use wasm_encoder::reencode::{Error as ReencodeError, Reencode, utils};
use wasm_encoder::{
    CodeSection, FunctionSection, ImportSection, IndirectNameMap, MemArg, NameMap, NameSection,
};
use wasmparser::{Name, Parser, TypeRef};

use crate::error::SlimError;
use crate::imports::FuncImport;

/// The module with the stripped imports replaced by local stubs.
pub(crate) fn strip_imports(module: &[u8], imports: &[FuncImport]) -> Result<Vec<u8>, SlimError> {
    let mut rewriter = Rewriter::new(imports);
    let mut out = wasm_encoder::Module::new();
    rewriter
        .parse_core_module(&mut out, Parser::new(0), module)
        .map_err(|e| SlimError::Encode(e.to_string()))?;
    let bytes = out.finish();
    wasmparser::Validator::new()
        .validate_all(&bytes)
        .map_err(|e| SlimError::Encode(format!("the rewritten module does not validate: {e}")))?;
    Ok(bytes)
}

struct Rewriter<'a> {
    imports: &'a [FuncImport],
    /// Old function index of each import → new index.
    import_map: Vec<u32>,
    /// The stripped imports, in stub order.
    stubs: Vec<&'a FuncImport>,
}

impl<'a> Rewriter<'a> {
    fn new(imports: &'a [FuncImport]) -> Self {
        let kept = imports.iter().filter(|i| !i.strip).count();
        let (mut next_kept, mut next_stub) = (0u32, 0u32);
        let mut import_map = Vec::with_capacity(imports.len());
        let mut stubs = Vec::new();
        for import in imports {
            if import.strip {
                import_map.push(index(kept) + next_stub);
                next_stub += 1;
                stubs.push(import);
            } else {
                import_map.push(next_kept);
                next_kept += 1;
            }
        }
        Self {
            imports,
            import_map,
            stubs,
        }
    }

    fn stub_body(import: &FuncImport) -> wasm_encoder::Function {
        let mut body = wasm_encoder::Function::new([]);
        let mut code = body.instructions();
        if import.is_get_environment() {
            // Lowered `get-environment: func() -> list<tuple<string, string>>`
            // takes a return pointer and stores (pointer, length) there: an
            // empty list, the environment the host gives handlers anyway.
            let word = |offset| MemArg {
                offset,
                align: 2,
                memory_index: 0,
            };
            code.local_get(0)
                .i32_const(0)
                .i32_store(word(0))
                .local_get(0)
                .i32_const(0)
                .i32_store(word(4));
        } else {
            code.unreachable();
        }
        code.end();
        body
    }
}

fn index(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

type Result2<T> = Result<T, ReencodeError<std::convert::Infallible>>;

impl Reencode for Rewriter<'_> {
    type Error = std::convert::Infallible;

    fn function_index(&mut self, func: u32) -> Result2<u32> {
        Ok(self.import_map.get(func as usize).copied().unwrap_or(func))
    }

    fn parse_import_section(
        &mut self,
        imports: &mut ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Result2<()> {
        let mut func = 0usize;
        for import in section.into_imports() {
            let import = import?;
            if matches!(import.ty, TypeRef::Func(_)) {
                let strip = self.imports.get(func).is_some_and(|i| i.strip);
                func += 1;
                if strip {
                    continue;
                }
            }
            self.parse_import(imports, import)?;
        }
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result2<()> {
        for stub in &self.stubs {
            functions.function(stub.type_index);
        }
        for ty in section {
            let ty = self.type_index(ty?)?;
            functions.function(ty);
        }
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result2<()> {
        for stub in &self.stubs {
            code.function(&Self::stub_body(stub));
        }
        for body in section {
            self.parse_function_body(code, body?)?;
        }
        Ok(())
    }

    fn parse_custom_name_subsection(
        &mut self,
        names: &mut NameSection,
        section: Name<'_>,
    ) -> Result2<()> {
        // Name maps must be in increasing index order; renumbering the
        // imports can break that, so the function-keyed maps are rebuilt.
        match section {
            Name::Function(map) => {
                let mut entries = Vec::new();
                for naming in map {
                    let naming = naming?;
                    let new = self.function_index(naming.index)?;
                    let stripped = self.imports.get(naming.index as usize).filter(|i| i.strip);
                    let name = match stripped {
                        Some(import) => format!("stripped-import:{}", import.label()),
                        None => naming.name.to_owned(),
                    };
                    entries.push((new, name));
                }
                entries.sort_by_key(|(index, _)| *index);
                let mut out = NameMap::new();
                for (index, name) in &entries {
                    out.append(*index, name);
                }
                names.functions(&out);
            }
            Name::Local(map) => names.locals(&self.indirect(map)?),
            Name::Label(map) => names.labels(&self.indirect(map)?),
            other => utils::parse_custom_name_subsection(self, names, other)?,
        }
        Ok(())
    }
}

impl Rewriter<'_> {
    fn indirect(&mut self, map: wasmparser::IndirectNameMap<'_>) -> Result2<IndirectNameMap> {
        let mut entries = Vec::new();
        for naming in map {
            let naming = naming?;
            let mut inner = NameMap::new();
            for local in naming.names {
                let local = local?;
                inner.append(local.index, local.name);
            }
            entries.push((self.function_index(naming.index)?, inner));
        }
        entries.sort_by_key(|(index, _)| *index);
        let mut out = IndirectNameMap::new();
        for (index, inner) in &entries {
            out.append(*index, inner);
        }
        Ok(out)
    }
}
