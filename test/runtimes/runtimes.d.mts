// Types of runtimes.mjs for test/runtimes.test.ts.
export declare const repoRoot: string;
export declare const denoFlags: string[];
export type Runtime =
  | { name: string; command: string; args: (script: string) => string[]; missing?: undefined }
  | { name: string; missing: string; command?: undefined; args?: undefined };
export declare function runtime(name: string): Runtime;
export declare function current(): 'node' | 'bun' | 'deno';
export declare function self(script: string): { command: string; args: string[] };
