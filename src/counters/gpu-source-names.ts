/** The --gpu-source choices, apart from the registry so that the CLI declares them without loading any collector. */
export const GPU_SOURCES = ['auto', 'nvidia-smi', 'dcgm', 'hook', 'sim', 'none'] as const;
export type GpuSourceOption = (typeof GPU_SOURCES)[number];
export type GpuSourceName = Exclude<GpuSourceOption, 'auto'>;
