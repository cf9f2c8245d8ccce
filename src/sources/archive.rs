//! Reading manifest files out of untrusted `.tar.gz` bundles (HTTP bundles, OCI layers).
//!
//! Entries are read into memory, never unpacked to disk as they are, so an archive cannot
//! place a file anywhere (a kustomize build writes the checked files, by their cleaned paths,
//! to a private copy: [`super::kustomize`]). Still, an archive that *tries* something hostile is refused as a whole
//! rather than read in part, because its author did not mean what it would produce:
//!
//! - a path that is absolute, has a `..` component, or a Windows drive/UNC prefix;
//! - a symbolic or hard link (links could point out of the root; none is needed for
//!   manifests), a device, a FIFO or any other special entry;
//! - more than [`Limits::max_unpacked`] bytes after decompression (a decompression bomb is
//!   stopped while it inflates, not after), or more than [`Limits::max_entries`] entries.
//!   These bounds are a [`Budget`] shared by all archives of one source (the layers of an OCI
//!   artifact count together).
//!
//! Every gzip member is decompressed (a `.tar.gz` may be several concatenated members).
//!
//! Every regular file is kept, as a [`Tree`] (a kustomize overlay under the chosen directory
//! may read any file of the archive); [`read_tar_gz`] gives the `.yaml`, `.yml` and `.json`
//! files under the chosen directory, sorted by path (byte-wise), so the result does not
//! depend on the order inside the archive.

use std::io::Read;

use super::{Limits, SourceError, SourceFile, paths::clean_relative, tree::Tree};

/// Whether `data` starts like a gzip stream.
pub fn is_gzip(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
}

/// A reader that fails (instead of stopping silently) after `limit` bytes.
struct Capped<R> {
    inner: R,
    read: u64,
    limit: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read = self.read.saturating_add(n as u64);
        if self.read > self.limit {
            return Err(std::io::Error::other(CapExceeded));
        }
        Ok(n)
    }
}

#[derive(Debug)]
struct CapExceeded;
impl std::fmt::Display for CapExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decompression cap exceeded")
    }
}
impl std::error::Error for CapExceeded {}

fn is_cap(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<CapExceeded>())
}

/// What may still be unpacked. One budget covers every archive of a source (all layers of an
/// OCI artifact together), so that splitting content over many archives gains nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Bytes that may still be decompressed.
    pub unpacked: u64,
    /// Archive entries that may still be read.
    pub entries: usize,
    /// The limits the budget started from (for messages).
    pub max_unpacked: u64,
    pub max_entries: usize,
}

impl Budget {
    pub fn new(limits: &Limits) -> Self {
        Self {
            unpacked: limits.max_unpacked,
            entries: limits.max_entries,
            max_unpacked: limits.max_unpacked,
            max_entries: limits.max_entries,
        }
    }

    /// Takes `bytes` of unpacked content (a file that is not an archive, e.g. an OCI layer read
    /// as one manifest file) and one entry.
    pub fn take_file(&mut self, bytes: u64) -> Result<(), SourceError> {
        if self.entries == 0 {
            return Err(self.too_many_entries());
        }
        if bytes > self.unpacked {
            return Err(self.too_big());
        }
        self.entries -= 1;
        self.unpacked -= bytes;
        Ok(())
    }

    fn too_big(&self) -> SourceError {
        SourceError::Failed(format!(
            "the archive decompresses to more than {} bytes (the operator's --source-max-unpacked-mib); refusing it",
            self.max_unpacked
        ))
    }

    fn too_many_entries(&self) -> SourceError {
        SourceError::Failed(format!(
            "the archive has more than {} entries (the operator's --source-max-entries); refusing it",
            self.max_entries
        ))
    }
}

/// What [`read_tar_gz_with`] found.
#[derive(Debug)]
pub struct Unpacked {
    /// Every regular file of the archive.
    pub tree: Tree,
    /// Whether any entry (a directory or a file of any kind) lies at or under the prefix: a
    /// `path` that names nothing in the archive is an error, not an empty source.
    pub prefix_found: bool,
    /// What is left of the budget.
    pub budget: Budget,
}

/// Reads the manifest files under `prefix` (see [`directory_prefix`]) from a gzip-compressed
/// tar archive. The error is a complete sentence fragment naming what was refused.
pub fn read_tar_gz(
    data: &[u8],
    prefix: &str,
    limits: &Limits,
) -> Result<Vec<SourceFile>, SourceError> {
    let unpacked = read_tar_gz_with(data, prefix, Budget::new(limits))?;
    Ok(unpacked.tree.manifest_files(prefix)?)
}

/// Like [`read_tar_gz`], within what is left of `budget` (shared by the archives of a source).
/// Every gzip member is read (`MultiGzDecoder`: concatenated members are one stream).
pub fn read_tar_gz_with(
    data: &[u8],
    prefix: &str,
    budget: Budget,
) -> Result<Unpacked, SourceError> {
    read_tar_gz_reserving(data, prefix, budget, &mut |_| Ok(()))
}

/// Like [`read_tar_gz_with`], calling `reserve` with the size of each manifest file before
/// it is read into memory (the operator's memory budget, [`super::memory`]); an error of
/// `reserve` stops the read.
pub fn read_tar_gz_reserving(
    data: &[u8],
    prefix: &str,
    budget: Budget,
    reserve: &mut dyn FnMut(u64) -> Result<(), SourceError>,
) -> Result<Unpacked, SourceError> {
    let capped = Capped {
        inner: flate2::read::MultiGzDecoder::new(data),
        read: 0,
        limit: budget.unpacked,
    };
    let mut archive = tar::Archive::new(capped);
    let entries = archive
        .entries()
        .map_err(|e| SourceError::Failed(format!("not a readable tar.gz archive: {e}")))?;
    let mut reader = EntryReader::new(prefix, budget);
    for entry in entries {
        let entry =
            entry.map_err(|e| read_failure(&budget, &e, "not a readable tar.gz archive"))?;
        reader.take(entry, reserve)?;
    }
    // Read to the end so that trailing garbage or a bomb after the last entry is noticed too.
    let mut rest = archive.into_inner();
    std::io::copy(&mut rest, &mut std::io::sink())
        .map_err(|e| read_failure(&budget, &e, "not a readable tar.gz archive"))?;
    Ok(reader.finish(rest.read))
}

/// The message of a failed read: the budget's "too big" when the decompression cap stopped
/// it, else `context: error`.
fn read_failure(budget: &Budget, e: &std::io::Error, context: &str) -> SourceError {
    if is_cap(e) {
        budget.too_big()
    } else {
        SourceError::Failed(format!("{context}: {e}"))
    }
}

/// The state of reading the entries of one archive: what was found so far and how many
/// entries were taken from the budget.
struct EntryReader<'p> {
    /// The directory filter (see [`directory_prefix`]).
    prefix: &'p str,
    /// `prefix` without its trailing `/`.
    dir: &'p str,
    /// The budget the archive started with.
    budget: Budget,
    tree: Tree,
    /// Whether any entry lies at or under the prefix.
    prefix_found: bool,
    /// Entries read.
    count: usize,
}

impl<'p> EntryReader<'p> {
    fn new(prefix: &'p str, budget: Budget) -> Self {
        Self {
            prefix,
            dir: prefix.trim_end_matches('/'),
            budget,
            tree: Tree::new(),
            prefix_found: prefix.is_empty(),
            count: 0,
        }
    }

    /// Takes one entry from the budget, checks it and reads it if it is a regular file. An
    /// entry beyond the entry budget, with a path that is absolute or leaves the root, a link,
    /// a special file, or a file that appears a second time refuses the whole archive.
    fn take<R: Read>(
        &mut self,
        mut entry: tar::Entry<'_, R>,
        reserve: &mut dyn FnMut(u64) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        if self.count >= self.budget.entries {
            return Err(self.budget.too_many_entries());
        }
        self.count += 1;
        let raw = entry.path_bytes();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let Some(path) = clean_relative(&name) else {
            return Err(SourceError::Failed(format!(
                "entry {name:?} is an absolute path or leaves the archive root ('..'); refusing the archive"
            )));
        };
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            let target = entry
                .link_name_bytes()
                .map(|t| String::from_utf8_lossy(&t).into_owned())
                .unwrap_or_default();
            return Err(SourceError::Failed(format!(
                "entry {name:?} is a link (to {target:?}); links are not allowed in a manifest archive, refusing it"
            )));
        }
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            return Ok(());
        }
        if !self.prefix_found
            && !path.is_empty()
            && (path == self.dir || path.starts_with(self.prefix))
        {
            self.prefix_found = true;
        }
        if kind.is_dir() {
            return Ok(());
        }
        if !(kind.is_file() || kind.is_contiguous()) {
            return Err(SourceError::Failed(format!(
                "entry {name:?} is a special file ({kind:?}); refusing the archive"
            )));
        }
        if path.is_empty() {
            return Ok(());
        }
        // The memory for the file is reserved before it is read (its size from the header,
        // which also bounds what is read; never more than the unpacking budget).
        let size = entry.size().min(self.budget.unpacked);
        reserve(size)?;
        let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        entry
            .read_to_end(&mut content)
            .map_err(|e| read_failure(&self.budget, &e, &format!("reading entry {name:?}")))?;
        if self.tree.is_file(&path) {
            return Err(SourceError::Failed(format!(
                "file {path} appears more than once in the archive; refusing it"
            )));
        }
        self.tree.insert(path, content);
        Ok(())
    }

    /// What was found, the files sorted by path, with what is left of the budget once
    /// `unpacked` bytes were decompressed.
    fn finish(self, unpacked: u64) -> Unpacked {
        let left = Budget {
            unpacked: self.budget.unpacked.saturating_sub(unpacked),
            entries: self.budget.entries.saturating_sub(self.count),
            ..self.budget
        };
        Unpacked {
            tree: self.tree,
            prefix_found: self.prefix_found,
            budget: left,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub enum Entry<'a> {
        File(&'a str, &'a [u8]),
        Dir(&'a str),
        Symlink(&'a str, &'a str),
        HardLink(&'a str, &'a str),
        Fifo(&'a str),
    }

    /// Builds a tar.gz, writing names raw (so hostile names are possible).
    pub fn tar_gz(entries: &[Entry<'_>]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for e in entries {
            let mut header = tar::Header::new_gnu();
            let (name, kind, data, link): (&str, tar::EntryType, &[u8], Option<&str>) = match e {
                Entry::File(n, d) => (n, tar::EntryType::Regular, d, None),
                Entry::Dir(n) => (n, tar::EntryType::Directory, b"", None),
                Entry::Symlink(n, t) => (n, tar::EntryType::Symlink, b"", Some(t)),
                Entry::HardLink(n, t) => (n, tar::EntryType::Link, b"", Some(t)),
                Entry::Fifo(n) => (n, tar::EntryType::Fifo, b"", None),
            };
            header.set_entry_type(kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            {
                let gnu = header.as_gnu_mut().expect("gnu header");
                gnu.name[..name.len()].copy_from_slice(name.as_bytes());
                if let Some(l) = link {
                    gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
                }
            }
            header.set_cksum();
            builder.append(&header, data).expect("append");
        }
        let tar = builder.into_inner().expect("tar");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, &tar).expect("gzip");
        gz.finish().expect("gzip")
    }

    fn limits() -> Limits {
        Limits {
            max_unpacked: 1 << 20,
            ..Limits::default()
        }
    }

    const CM: &[u8] = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n";

    #[test]
    fn reads_only_manifest_files_sorted_under_the_prefix() {
        let data = tar_gz(&[
            Entry::Dir("./app/"),
            Entry::File("./app/z.yaml", CM),
            Entry::File("app/b/a.json", b"{}"),
            Entry::File("app/README.md", b"# no"),
            Entry::File("app/a.YML", CM),
            Entry::File("other/x.yaml", CM),
            Entry::File("app/script.sh", b"rm -rf /"),
        ]);
        let files = read_tar_gz(&data, "app/", &limits()).expect("ok");
        let names: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["app/a.YML", "app/b/a.json", "app/z.yaml"]);
        let all = read_tar_gz(&data, "", &limits()).expect("ok");
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn refuses_traversal_and_absolute_paths() {
        for name in [
            "../evil.yaml",
            "a/../../evil.yaml",
            "/etc/evil.yaml",
            "C:/x.yaml",
        ] {
            let data = tar_gz(&[Entry::File(name, CM)]);
            let err = read_tar_gz(&data, "", &limits())
                .expect_err(name)
                .to_string();
            assert!(err.contains("leaves the archive root"), "{name}: {err}");
        }
    }

    #[test]
    fn refuses_links_and_special_files() {
        let data = tar_gz(&[Entry::Symlink("a.yaml", "/etc/passwd")]);
        let err = read_tar_gz(&data, "", &limits())
            .expect_err("symlink")
            .to_string();
        assert!(err.contains("is a link"), "{err}");
        let data = tar_gz(&[
            Entry::File("a.yaml", CM),
            Entry::HardLink("b.yaml", "../../x"),
        ]);
        let err = read_tar_gz(&data, "", &limits())
            .expect_err("hardlink")
            .to_string();
        assert!(err.contains("is a link"), "{err}");
        let data = tar_gz(&[Entry::Fifo("f.yaml")]);
        let err = read_tar_gz(&data, "", &limits())
            .expect_err("fifo")
            .to_string();
        assert!(err.contains("special file"), "{err}");
    }

    #[test]
    fn refuses_a_decompression_bomb_while_inflating() {
        let zeros = vec![0u8; 3 << 20];
        let data = tar_gz(&[Entry::File("big.yaml", &zeros)]);
        assert!(data.len() < 64 * 1024, "compresses well: {}", data.len());
        let err = read_tar_gz(&data, "", &limits())
            .expect_err("bomb")
            .to_string();
        assert!(err.contains("decompresses to more than"), "{err}");
        // Also when the big file is not a manifest (it is never read, but still inflated).
        let data = tar_gz(&[Entry::File("big.bin", &zeros)]);
        let err = read_tar_gz(&data, "", &limits())
            .expect_err("bomb")
            .to_string();
        assert!(err.contains("decompresses to more than"), "{err}");
    }

    #[test]
    fn refuses_too_many_entries_and_garbage() {
        let data = tar_gz(&[Entry::File("a.txt", b""), Entry::File("b.txt", b"")]);
        let l = Limits {
            max_entries: 1,
            ..limits()
        };
        assert!(read_tar_gz(&data, "", &l).is_err());
        assert!(read_tar_gz(b"\x1f\x8bnot gzip", "", &limits()).is_err());
    }

    #[test]
    fn one_budget_covers_several_archives() {
        let l = Limits {
            max_unpacked: 64 << 10,
            max_entries: 3,
            ..Limits::default()
        };
        let half = vec![b' '; 20 << 10];
        let data = tar_gz(&[Entry::File("a.yaml", &half)]);
        let first = read_tar_gz_with(&data, "", Budget::new(&l)).expect("fits");
        assert!(first.budget.unpacked < l.max_unpacked - (20 << 10));
        assert_eq!(first.budget.entries, 2);
        let second = read_tar_gz_with(&data, "", first.budget).expect("still fits");
        // The third copy would fit alone, not after the first two.
        assert!(read_tar_gz_with(&data, "", Budget::new(&l)).is_ok());
        let err = read_tar_gz_with(&data, "", second.budget)
            .expect_err("over the budget")
            .to_string();
        assert!(
            err.contains("decompresses to more than 65536 bytes"),
            "{err}"
        );
        // Entries too.
        let small = tar_gz(&[Entry::File("a.yaml", CM), Entry::File("b.yaml", CM)]);
        let left = read_tar_gz_with(&small, "", Budget::new(&l))
            .expect("fits")
            .budget;
        let err = read_tar_gz_with(&small, "", left)
            .expect_err("entries")
            .to_string();
        assert!(err.contains("more than 3 entries"), "{err}");
        let mut b = Budget::new(&l);
        assert!(b.take_file(60 << 10).is_ok());
        assert!(b.take_file(5 << 10).is_err());
    }

    #[test]
    fn tells_whether_the_prefix_exists() {
        let data = tar_gz(&[
            Entry::Dir("deploy/"),
            Entry::Dir("empty/"),
            Entry::File("deploy/a.yaml", CM),
            Entry::File("docs/readme.md", b"x"),
        ]);
        let found = |p: &str| {
            read_tar_gz_with(&data, p, Budget::new(&limits()))
                .expect("ok")
                .prefix_found
        };
        assert!(found(""));
        assert!(found("deploy/"));
        assert!(
            found("empty/"),
            "an empty directory exists (and yields no file)"
        );
        assert!(found("docs/"));
        assert!(!found("missing/"));
        assert!(!found("deplo/"));
    }

    #[test]
    fn reads_every_gzip_member() {
        // A tar stream split over two concatenated gzip members.
        let mut builder = tar::Builder::new(Vec::new());
        for (name, data) in [("a.yaml", CM), ("b.yaml", CM)] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            builder.append_data(&mut h, name, data).expect("append");
        }
        let tar = builder.into_inner().expect("tar");
        let split = 512 + 512;
        let gz = |part: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            std::io::Write::write_all(&mut e, part).expect("gzip");
            e.finish().expect("gzip")
        };
        let mut data = gz(&tar[..split]);
        data.extend(gz(&tar[split..]));
        let files = read_tar_gz(&data, "", &limits()).expect("ok");
        let names: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["a.yaml", "b.yaml"]);
    }
}
