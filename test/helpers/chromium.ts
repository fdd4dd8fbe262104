// Chromium launch settings shared by the browser harness and Vitest's browser mode.
import { existsSync } from 'node:fs';

/** Flags that give headless Chromium a WebGPU adapter on a machine without a GPU (SwiftShader). */
export const SWIFTSHADER_FLAGS = [
  '--enable-unsafe-webgpu',
  '--enable-features=Vulkan',
  '--use-vulkan=swiftshader',
  '--use-webgpu-adapter=swiftshader',
  '--enable-unsafe-swiftshader',
  '--no-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];

/** Flags for a machine with a real GPU driven through Vulkan (set WEFT_GPU=real). */
export const REAL_GPU_FLAGS = [
  '--enable-unsafe-webgpu',
  '--enable-features=Vulkan',
  '--use-vulkan',
  '--ignore-gpu-blocklist',
  '--no-sandbox',
  '--disable-background-networking',
];

/** Path of Chromium: $CHROMIUM, else Debian's /usr/bin/chromium. */
export function chromiumPath(): string {
  const path = process.env.CHROMIUM ?? '/usr/bin/chromium';
  if (!existsSync(path))
    throw new Error(`Chromium not found at ${path}: apt-get install chromium (or set CHROMIUM)`);
  return path;
}

/** Launch options for playwright's `chromium.launch`. */
export function chromiumLaunchOptions(): { executablePath: string; headless: true; args: string[] } {
  return {
    executablePath: chromiumPath(),
    headless: true,
    args: process.env.WEFT_GPU === 'real' ? REAL_GPU_FLAGS : SWIFTSHADER_FLAGS,
  };
}
