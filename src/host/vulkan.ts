// The one place a Node entry point chooses the Vulkan driver Dawn will use (weft's library code never
// touches process.env). The CLI (--vulkan), the benchmarks (--vulkan), the tests (the vitest
// project's `vulkan`) and library users (`useVulkanDriver` from weft/node) all call it before the
// first adapter request.
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { GpuUnavailableError } from '../errors.js';

/**
 * A Vulkan driver for Dawn in Node:
 * - `swiftshader`: Chromium's CPU driver (Debian's `chromium` package ships it): subgroups (size 4),
 *   no shader-f16. Weft runs its serial kernel forms there by default.
 * - `lavapipe`: Mesa's CPU driver (Mesa 25, Debian's bookworm-backports `mesa-vulkan-drivers`;
 *   Mesa 22's is refused by Dawn): shader-f16, subgroups (size 8), 128 MiB storage bindings.
 * - `system`: whatever the Vulkan loader finds (the machine's GPU driver).
 */
export type VulkanDriver = 'swiftshader' | 'lavapipe' | 'system';

/** The names {@link useVulkanDriver} takes: a driver, or `auto`. */
export const VULKAN_DRIVERS = ['auto', 'swiftshader', 'lavapipe', 'system'] as const;

/** Vulkan ICD files of the CPU drivers, as Debian installs them. */
export const VULKAN_ICDS: Readonly<Record<Exclude<VulkanDriver, 'system'>, string>> = {
  swiftshader: '/usr/lib/chromium/vk_swiftshader_icd.json',
  lavapipe: '/usr/share/vulkan/icd.d/lvp_icd.json',
};

/** Device nodes that exist when the machine has a GPU a Vulkan driver could use. */
const GPU_DEVICE_NODES = ['/dev/dri', '/dev/nvidia0', '/dev/dxg'];

/** What {@link useVulkanDriver} chose: the driver, and the ICD file it points the loader at. */
export interface VulkanChoice {
  readonly driver: VulkanDriver | 'env';
  /** VK_ICD_FILENAMES as set (undefined: the loader's own search). */
  readonly icd: string | undefined;
}

/** The driver `auto` picks on this machine (see {@link useVulkanDriver}). */
export function autoVulkanDriver(): VulkanDriver {
  if (GPU_DEVICE_NODES.some((p) => existsSync(p))) return 'system';
  if (existsSync(VULKAN_ICDS.swiftshader)) return 'swiftshader';
  if (existsSync(VULKAN_ICDS.lavapipe)) return 'lavapipe';
  return 'system';
}

/**
 * Node only: points Dawn at a Vulkan driver by setting `VK_ICD_FILENAMES`, which the Vulkan loader
 * reads when Dawn first asks for adapters, so call it before `createGpuContext` or `createEngine`.
 * `auto` (the default) keeps a `VK_ICD_FILENAMES` already set (`driver: 'env'`), else takes the
 * system's driver on a machine with a GPU device node, else SwiftShader, else lavapipe. Also gives
 * Dawn a private `XDG_RUNTIME_DIR` when none is set (it warns without one). Throws
 * {@link GpuUnavailableError} naming the missing file when the chosen CPU driver is not installed,
 * or when this process already chose another driver (Dawn's instance keeps the first).
 */
export function useVulkanDriver(driver: VulkanDriver | 'auto' = 'auto'): VulkanChoice {
  const env = process.env;
  env.XDG_RUNTIME_DIR ??= mkdtempSync(`${tmpdir()}/weft-xdg-`);
  if (driver === 'auto' && env.VK_ICD_FILENAMES !== undefined)
    return { driver: 'env', icd: env.VK_ICD_FILENAMES };
  const chosen = driver === 'auto' ? autoVulkanDriver() : driver;
  const icd = chosen === 'system' ? undefined : VULKAN_ICDS[chosen];
  if (icd !== undefined && !existsSync(icd))
    throw new GpuUnavailableError(
      `Vulkan driver ${chosen}: ${icd} is missing (${chosen === 'lavapipe' ? "install Mesa 25's mesa-vulkan-drivers, e.g. bash scripts/setup.sh" : 'install Debian’s chromium'})`,
    );
  if (chosen !== previous && previous !== undefined)
    throw new GpuUnavailableError(
      `Vulkan driver ${chosen}: this process already chose ${previous} (Dawn's instance keeps the driver it found first)`,
    );
  previous = chosen;
  if (icd === undefined) delete env.VK_ICD_FILENAMES;
  else env.VK_ICD_FILENAMES = icd;
  return { driver: chosen, icd };
}

let previous: VulkanDriver | undefined;
