// Bytes of a stream kept within a budget: the last `capacity` bytes (a job's
// ring, a collector's tail) and the first ones (a collector's head). The
// bytes are copied into blocks of their own as they come, never kept as the
// reads' Buffers: a command that writes one byte per write() makes one
// Buffer per byte (an object and a reference to a pooled slab each), and two
// million of them in a "1 MiB" ring cost hundreds of MiB. Held memory is the
// bytes held plus at most two blocks.

/** The largest block: a ring of 1 MiB is 16 blocks; a small one is one block its size. */
const MAX_BLOCK = 64 * 1024;

/** Which part of an output longer than `maxBuffer` is kept. */
export type Keep = 'head' | 'tail' | 'both';

/**
 * Where the last whole character of `buf` ends: `buf.length`, unless the
 * buffer ends inside a multi-byte UTF-8 character, which is then left out.
 */
export function utf8End(buf: Buffer, end = buf.length): number {
  for (let i = end - 1; i >= 0 && i >= end - 4; i--) {
    const b = buf[i];
    if ((b & 0xc0) === 0x80) continue;
    const length = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return i + length > end ? i : end;
  }
  // Only continuation bytes: not UTF-8 text, nothing to protect.
  return end;
}

/** Where the first whole character of `buf` starts: past the continuation bytes of one cut in front. */
export function utf8Start(buf: Buffer, start = 0): number {
  let i = start;
  while (i < buf.length && i < start + 3 && (buf[i] & 0xc0) === 0x80) i++;
  return i < buf.length && (buf[i] & 0xc0) === 0x80 ? start : i;
}

/**
 * Bytes in blocks of our own, appended at the end and dropped from the
 * front. Writing copies each byte once; a block is allocated only when the
 * last one is full, so memory follows what is held, not the capacity.
 */
class Blocks {
  #blocks: Buffer[] = [];
  /** Index of the first live block (the ones before are dropped, their slots reused now and then). */
  #first = 0;
  /** Offset of the first held byte in the first live block. */
  #head = 0;
  /** Bytes used in the last block. */
  #fill = 0;
  size = 0;

  /** Appends `chunk`, allocating blocks of `block` bytes as needed. */
  append(chunk: Buffer, block: number): void {
    let at = 0;
    while (at < chunk.length) {
      let last = this.#blocks.length > this.#first ? this.#blocks[this.#blocks.length - 1] : undefined;
      if (last === undefined || this.#fill === last.length) {
        // Not from the shared pool: a pooled slab would be held by others' Buffers too.
        last = Buffer.allocUnsafeSlow(block);
        this.#blocks.push(last);
        this.#fill = 0;
      }
      const n = Math.min(chunk.length - at, last.length - this.#fill);
      if (n === 1) last[this.#fill] = chunk[at];
      else chunk.copy(last, this.#fill, at, at + n);
      this.#fill += n;
      at += n;
    }
    this.size += chunk.length;
  }

  /** Drops the first `n` bytes held. */
  drop(n: number): void {
    if (n >= this.size) {
      this.clear();
      return;
    }
    this.size -= n;
    n += this.#head;
    // Every block but the last is full: whole ones go, the rest is an offset.
    while (this.#first < this.#blocks.length - 1 && n >= this.#blocks[this.#first].length) {
      n -= this.#blocks[this.#first].length;
      this.#first++;
    }
    this.#head = n;
    // Give the dropped slots back now and then, not on every write.
    if (this.#first > 64 && this.#first * 2 > this.#blocks.length) {
      this.#blocks = this.#blocks.slice(this.#first);
      this.#first = 0;
    }
  }

  clear(): void {
    this.#blocks = [];
    this.#first = 0;
    this.#head = 0;
    this.#fill = 0;
    this.size = 0;
  }

  /** Bytes held between offsets `lo` and `hi` (0 = the first held byte), as one Buffer (a view when one block holds them). */
  slice(lo: number, hi: number): Buffer {
    if (hi <= lo) return Buffer.alloc(0);
    const parts: Buffer[] = [];
    let at = -this.#head;
    for (let i = this.#first; i < this.#blocks.length && at < hi; i++) {
      const b = this.#blocks[i];
      const length = i === this.#blocks.length - 1 ? this.#fill : b.length;
      const end = at + length;
      if (end > lo) parts.push(b.subarray(Math.max(0, lo - at), Math.min(length, hi - at)));
      at = end;
    }
    return parts.length === 1 ? parts[0] : Buffer.concat(parts, hi - lo);
  }
}

function blockFor(capacity: number): number {
  return Math.max(1, Math.min(MAX_BLOCK, capacity));
}

/**
 * The last `capacity` bytes of a stream, and how many it had in all. A job's
 * ring buffer and the tail of a collector; it holds at most `capacity` bytes
 * plus two blocks, however the stream was cut into writes.
 */
export class ByteTail {
  readonly #blocks = new Blocks();
  #capacity: number;
  /** Bytes written since the start, kept or not. */
  total = 0;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  get capacity(): number {
    return this.#capacity;
  }

  /** Keeps more from now on (what was dropped stays dropped). */
  grow(capacity: number): void {
    this.#capacity = Math.max(this.#capacity, capacity);
  }

  /** Bytes held now. */
  get size(): number {
    return this.#blocks.size;
  }

  /** Offset in the stream of the first byte held; bytes before it were dropped. */
  get start(): number {
    return this.total - this.#blocks.size;
  }

  write(chunk: Buffer): void {
    this.total += chunk.length;
    const capacity = this.#capacity;
    if (capacity === 0 || chunk.length === 0) return;
    if (chunk.length >= capacity) {
      this.#blocks.clear();
      this.#blocks.append(chunk.subarray(chunk.length - capacity), blockFor(capacity));
      return;
    }
    const excess = this.#blocks.size + chunk.length - capacity;
    // Drop first: the bytes to go never need a block of their own.
    if (excess > 0) this.#blocks.drop(excess);
    this.#blocks.append(chunk, blockFor(capacity));
  }

  /** The bytes held between stream offsets `from` and `to` (clamped to what is held). */
  slice(from = this.start, to = this.total): Buffer {
    const lo = Math.max(from, this.start);
    const hi = Math.min(to, this.total);
    return this.#blocks.slice(lo - this.start, hi - this.start);
  }
}

/** What a collector kept, cut at character boundaries when asked. */
export interface Kept {
  head: Buffer;
  tail: Buffer;
  /** Bytes in neither: the stream's length minus what was kept. */
  omitted: number;
}

/**
 * Keeps at most `max` bytes of a stream: the first ones (`head`), the last
 * ones (`tail`), or half of each (`both`; the tail gets the odd byte), and
 * counts everything. It never stops reading: a writer blocked on a full
 * pipe would never exit.
 */
export class OutputCollector {
  readonly #head = new Blocks();
  #headMax: number;
  readonly #tail: ByteTail;
  readonly #keep: Keep;

  constructor(max: number, keep: Keep) {
    this.#keep = keep;
    this.#headMax = keep === 'head' ? max : keep === 'both' ? Math.floor(max / 2) : 0;
    this.#tail = new ByteTail(keep === 'head' ? 0 : max - this.#headMax);
  }

  /**
   * Raises the limit to `max` from now on. The head grows only while nothing
   * went past it yet (else the bytes after it are gone and it stays as it
   * is); the tail keeps more from now on.
   */
  grow(max: number): void {
    const headMax = this.#keep === 'head' ? max : this.#keep === 'both' ? Math.floor(max / 2) : 0;
    if (this.#tail.total === 0) this.#headMax = Math.max(this.#headMax, headMax);
    if (this.#keep !== 'head') this.#tail.grow(max - this.#headMax);
  }

  get total(): number {
    return this.#head.size + this.#tail.total;
  }

  write(chunk: Buffer): void {
    const headSize = this.#head.size;
    if (headSize < this.#headMax) {
      const room = this.#headMax - headSize;
      const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
      this.#head.append(part, blockFor(this.#headMax));
      if (part.length === chunk.length) return;
      chunk = chunk.subarray(part.length);
    }
    this.#tail.write(chunk);
  }

  /** `utf8`: a character cut by the limit is left out whole, on either side of the gap. */
  kept(utf8: boolean): Kept {
    let head = this.#head.slice(0, this.#head.size);
    let tail = this.#tail.slice();
    const omitted = this.total - head.length - tail.length;
    if (omitted === 0 || !utf8) return { head, tail, omitted };
    head = head.subarray(0, utf8End(head));
    tail = tail.subarray(utf8Start(tail));
    return { head, tail, omitted: this.total - head.length - tail.length };
  }
}
