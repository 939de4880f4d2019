// Tar on the client side, for uploadTree and downloadTree: a writer that
// makes a POSIX (pax) tar of a local directory, and a reader that extracts
// one into a local directory without ever writing outside it. Node has no
// tar of its own; this covers what the server reads and writes (ustar
// headers, pax extended headers for long names and large sizes, GNU long
// names on input).
import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';

const BLOCK = 512;

/** A tar the client refuses to extract (a name or link that would leave the directory, a broken header). */
export class UnsafeArchive extends Error {
  constructor(
    readonly entry: string,
    readonly problem: string,
  ) {
    super(`archive entry ${JSON.stringify(entry)}: ${problem}`);
    this.name = 'UnsafeArchive';
  }
}

// ---- writing ---------------------------------------------------------------

function octal(buf: Buffer, off: number, len: number, value: number): void {
  buf.write(value.toString(8).padStart(len - 1, '0') + '\0', off, len, 'ascii');
}

function paxRecord(key: string, value: string): Buffer {
  const body = ` ${key}=${value}\n`;
  // The length counts its own digits.
  const base = Buffer.byteLength(body);
  let total = base + String(base).length;
  if (String(total).length !== String(base).length) total = base + String(total).length;
  return Buffer.from(`${total}${body}`);
}

function padding(size: number): Buffer {
  return Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK);
}

interface HeaderFields {
  name: string;
  type: string; // '0', '1', '2', '5', 'x'
  mode: number;
  size: number;
  mtime: number;
  linkname?: string;
}

/** One 512-byte ustar header; names must already fit (100 bytes). */
function header(h: HeaderFields): Buffer {
  const b = Buffer.alloc(BLOCK);
  b.write(h.name, 0, 100, 'utf8');
  octal(b, 100, 8, h.mode & 0o7777);
  octal(b, 108, 8, 0);
  octal(b, 116, 8, 0);
  octal(b, 124, 12, h.size);
  octal(b, 136, 12, Math.max(0, Math.floor(h.mtime)));
  b.fill(' ', 148, 156);
  b.write(h.type, 156, 1, 'ascii');
  if (h.linkname) b.write(h.linkname, 157, 100, 'utf8');
  b.write('ustar\0', 257, 6, 'ascii');
  b.write('00', 263, 2, 'ascii');
  let sum = 0;
  for (const x of b) sum += x;
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8, 'ascii');
  return b;
}

/** Header blocks of one entry: a pax header first when a name, link or size does not fit. */
function entryHeaders(h: HeaderFields): Buffer[] {
  const pax: Buffer[] = [];
  let name = h.name;
  let linkname = h.linkname;
  if (Buffer.byteLength(name) > 100) {
    pax.push(paxRecord('path', name));
    name = name.slice(0, 90).replace(/[^\x20-\x7e]/g, '_');
  }
  if (linkname && Buffer.byteLength(linkname) > 100) {
    pax.push(paxRecord('linkpath', linkname));
    linkname = linkname.slice(0, 90).replace(/[^\x20-\x7e]/g, '_');
  }
  let size = h.size;
  if (size > 0o77777777777) {
    pax.push(paxRecord('size', String(size)));
    size = 0;
  }
  const out: Buffer[] = [];
  if (pax.length) {
    const body = Buffer.concat(pax);
    out.push(header({ name: 'PaxHeader', type: 'x', mode: 0o644, size: body.length, mtime: h.mtime }), body, padding(body.length));
  }
  out.push(header({ ...h, name, linkname, size }));
  return out;
}

/**
 * A tar of `dir`'s contents (names relative to it, sorted per directory):
 * directories, regular files, and symlinks stored as links (never
 * followed). Sockets, FIFOs and devices are left out. Owners are stored as
 * 0; modes and mtimes are kept. Files are read as the tar is consumed.
 */
export async function* tarDirectory(dir: string): AsyncGenerator<Buffer> {
  const root = await fsp.lstat(dir);
  if (!root.isDirectory()) throw new Error(`uploadTree: ${dir} is not a directory`);
  async function* walk(rel: string): AsyncGenerator<Buffer> {
    const names = (await fsp.readdir(path.join(dir, rel))).sort();
    for (const n of names) {
      const r = rel ? `${rel}/${n}` : n;
      const full = path.join(dir, r);
      const st = await fsp.lstat(full);
      const mtime = st.mtimeMs / 1000;
      if (st.isDirectory()) {
        yield* entryHeaders({ name: `${r}/`, type: '5', mode: st.mode, size: 0, mtime });
        yield* walk(r);
      } else if (st.isSymbolicLink()) {
        yield* entryHeaders({ name: r, type: '2', mode: st.mode, size: 0, mtime, linkname: await fsp.readlink(full) });
      } else if (st.isFile()) {
        // The size as first seen: a file that grows is cut, one that shrinks zero-padded.
        const size = st.size;
        yield* entryHeaders({ name: r, type: '0', mode: st.mode, size, mtime });
        let left = size;
        const fh = await fsp.open(full, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
        try {
          while (left > 0) {
            const b = Buffer.alloc(Math.min(left, 1024 * 1024));
            const { bytesRead } = await fh.read(b, 0, b.length, null);
            if (bytesRead === 0) break;
            left -= bytesRead;
            yield b.subarray(0, bytesRead);
          }
        } finally {
          await fh.close();
        }
        if (left > 0) yield Buffer.alloc(left);
        yield padding(size);
      }
    }
  }
  yield* walk('');
  yield Buffer.alloc(2 * BLOCK);
}

// ---- reading ---------------------------------------------------------------

/** Reads exact byte counts from an async iterable of Buffers. */
class Blocks {
  private buf: Buffer = Buffer.alloc(0);
  private readonly it: AsyncIterator<Buffer>;
  private done = false;
  constructor(src: AsyncIterable<Buffer>) {
    this.it = src[Symbol.asyncIterator]();
  }
  /** Up to `n` bytes (fewer only at the end of the stream). */
  async read(n: number): Promise<Buffer> {
    while (this.buf.length < n && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else this.buf = this.buf.length ? Buffer.concat([this.buf, r.value]) : r.value;
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(out.length);
    return out;
  }
  /** Some bytes, at most `n` (0 only at the end). */
  async some(n: number): Promise<Buffer> {
    if (!this.buf.length && !this.done) {
      const r = await this.it.next();
      if (r.done) this.done = true;
      else this.buf = r.value;
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(out.length);
    return out;
  }
  /** Reads the rest, so the producer finishes (e.g. to get a trailer). */
  async drain(): Promise<void> {
    this.buf = Buffer.alloc(0);
    while (!this.done) if ((await this.it.next()).done) this.done = true;
  }
  async close(): Promise<void> {
    await this.it.return?.();
  }
}

function cstr(b: Buffer, off: number, len: number): string {
  const s = b.subarray(off, off + len);
  const z = s.indexOf(0);
  return (z < 0 ? s : s.subarray(0, z)).toString('utf8');
}

function num(b: Buffer, off: number, len: number): number {
  const f = b.subarray(off, off + len);
  if (f[0] & 0x80) {
    // base-256
    let v = 0;
    for (let i = 1; i < f.length; i++) v = v * 256 + f[i];
    return v;
  }
  const s = cstr(b, off, len).trim();
  return s ? parseInt(s, 8) : 0;
}

function parsePax(body: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let off = 0;
  while (off < body.length) {
    const sp = body.indexOf(0x20, off);
    if (sp < 0) break;
    const len = parseInt(body.subarray(off, sp).toString('ascii'), 10);
    if (!(len > 0)) break;
    const rec = body.subarray(sp + 1, off + len - 1).toString('utf8');
    const eq = rec.indexOf('=');
    if (eq > 0) out[rec.slice(0, eq)] = rec.slice(eq + 1);
    off += len;
  }
  return out;
}

/** The checked relative components of an entry name; throws for absolute or ".." names. */
function components(name: string): string[] {
  if (name.startsWith('/')) throw new UnsafeArchive(name, 'absolute');
  if (name.includes('\0')) throw new UnsafeArchive(name, 'bad_name');
  const parts = name.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new UnsafeArchive(name, 'dotdot');
  return parts;
}

export interface ExtractOptions {
  /** Keep symlinks whose target leads outside the directory (never followed while extracting either way). Default false: refused. */
  allowOutsideSymlinks?: boolean;
}

/**
 * Extracts the tar read from `src` into `dest` (made when missing). Every
 * name is checked: absolute names and ".." components are refused; no
 * entry is written through a symlink (each parent directory is checked
 * with lstat, files are created with O_NOFOLLOW after removing what was
 * there); a hard link must name an earlier entry of the archive; a
 * symlink whose target leaves `dest` is refused unless allowed. Modes
 * (0777) and mtimes are applied; owners are ignored.
 */
export async function extractTar(src: AsyncIterable<Buffer>, dest: string, opts: ExtractOptions = {}): Promise<void> {
  await fsp.mkdir(dest, { recursive: true });
  const root = await fsp.realpath(dest);
  const r = new Blocks(src);
  const made = new Set<string>();
  const dirModes: [string, number, number][] = [];
  const symlinks: [string, string, string][] = [];
  let pax: Record<string, string> = {};
  let longName: string | undefined;
  let longLink: string | undefined;

  // A directory chain below root, made as needed, never through a symlink.
  const ensureDirs = async (parts: string[], entry: string) => {
    let cur = root;
    for (const p of parts) {
      cur = path.join(cur, p);
      let st: fs.Stats | undefined;
      try {
        st = await fsp.lstat(cur);
      } catch {
        await fsp.mkdir(cur, 0o755);
        continue;
      }
      if (!st.isDirectory()) throw new UnsafeArchive(entry, 'through_symlink');
    }
    return cur;
  };
  const clear = async (full: string, entry: string) => {
    let st: fs.Stats;
    try {
      st = await fsp.lstat(full);
    } catch {
      return;
    }
    if (st.isDirectory()) throw new UnsafeArchive(entry, 'duplicate');
    await fsp.unlink(full);
  };

  try {
    for (;;) {
      const h = await r.read(BLOCK);
      if (h.length < BLOCK) throw new UnsafeArchive('', 'truncated');
      if (h.every((x) => x === 0)) break;
      let sum = 0;
      for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i];
      if (sum !== num(h, 148, 8)) throw new UnsafeArchive(cstr(h, 0, 100), 'malformed');
      const type = String.fromCharCode(h[156] || 0x30);
      let size = num(h, 124, 12);
      if (pax.size) size = Number(pax.size);
      const body = async () => {
        const b = await r.read(size);
        if (b.length < size) throw new UnsafeArchive('', 'truncated');
        await r.read((BLOCK - (size % BLOCK)) % BLOCK);
        return b;
      };
      if (type === 'x' || type === 'g' || type === 'L' || type === 'K') {
        const b = await body();
        if (type === 'x') pax = { ...pax, ...parsePax(b) };
        if (type === 'L') longName = cstr(b, 0, b.length);
        if (type === 'K') longLink = cstr(b, 0, b.length);
        continue;
      }
      const prefix = cstr(h, 345, 155);
      const ustar = cstr(h, 257, 6) === 'ustar';
      const name = pax.path ?? longName ?? (ustar && prefix ? `${prefix}/${cstr(h, 0, 100)}` : cstr(h, 0, 100));
      const link = pax.linkpath ?? longLink ?? cstr(h, 157, 100);
      const mode = num(h, 100, 8) & 0o777;
      const mtime = pax.mtime ? Number(pax.mtime) : num(h, 136, 12);
      pax = {};
      longName = longLink = undefined;

      const parts = components(name);
      if (!parts.length) {
        if (type === '5') continue; // "./": the root itself
        throw new UnsafeArchive(name, 'bad_name');
      }
      const parent = await ensureDirs(parts.slice(0, -1), name);
      const full = path.join(parent, parts[parts.length - 1]);
      const rel = parts.join('/');
      if (type === '5') {
        await ensureDirs(parts, name);
        dirModes.push([full, mode, mtime]);
      } else if (type === '0' || type === '7') {
        await clear(full, name);
        const fh = await fsp.open(full, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
        try {
          let left = size;
          while (left > 0) {
            const b = await r.some(Math.min(left, 1024 * 1024));
            if (!b.length) throw new UnsafeArchive(name, 'truncated');
            await fh.write(b);
            left -= b.length;
          }
          await fh.chmod(mode);
        } finally {
          await fh.close();
        }
        await r.read((BLOCK - (size % BLOCK)) % BLOCK);
        await fsp.utimes(full, mtime, mtime);
      } else if (type === '2') {
        if (!opts.allowOutsideSymlinks) {
          const target = path.resolve(path.dirname(path.join(root, rel)), link);
          if (path.isAbsolute(link) || (target !== root && !target.startsWith(root + path.sep))) {
            throw new UnsafeArchive(name, 'link_outside');
          }
        }
        await clear(full, name);
        await fsp.symlink(link, full);
        symlinks.push([name, rel, link]);
      } else if (type === '1') {
        const target = components(link).join('/');
        if (!made.has(target)) throw new UnsafeArchive(name, 'link_outside');
        await clear(full, name);
        await fsp.link(path.join(root, target), full);
      } else {
        // Devices, FIFOs and the rest are never made.
        if (size) await body();
        continue;
      }
      made.add(rel);
    }
    // Each symlink's target, walked from its directory over the final
    // tree, passes through no other symlink (which could lead it outside
    // even when its own text stays inside).
    if (!opts.allowOutsideSymlinks) {
      for (const [name, rel, link] of symlinks) {
        const at = rel.split('/').slice(0, -1);
        const comps = link.split('/');
        for (let k = 0; k < comps.length; k++) {
          const c = comps[k];
          if (c === '' || c === '.') continue;
          if (c === '..') at.pop();
          else at.push(c);
          if (k + 1 < comps.length) {
            const st = await fsp.lstat(path.join(root, ...at)).catch(() => undefined);
            if (st?.isSymbolicLink()) {
              await fsp.unlink(path.join(root, rel));
              throw new UnsafeArchive(name, 'link_outside');
            }
          }
        }
      }
    }
    // Directory modes last, deepest first, so a read-only one does not stop its own extraction.
    for (const [d, mode, mtime] of dirModes.reverse()) {
      await fsp.chmod(d, mode);
      await fsp.utimes(d, mtime, mtime);
    }
    await r.drain();
  } finally {
    await r.close();
  }
}
