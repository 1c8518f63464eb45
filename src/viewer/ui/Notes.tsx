import { Box, Text } from 'ink';
import type { Notes as NotesModel } from '../model/job-view.js';

/** How many lines the notes take: what the layout leaves the other sections. */
export function notesLines(notes: NotesModel | undefined): number {
  if (!notes) return 0;
  const lines = (notes.mfu ? 1 : 0) + (notes.memory ? 1 : 0) + (notes.waste ? 1 : 0) + notes.gpuOthers.length + notes.cpuOthers.length;
  return lines === 0 ? 0 : lines + 1;
}

/** Memory and its forecast, the waste ledger, and the processes beside the job: one line each, where measured. */
export function Notes({ notes }: { notes: NotesModel }) {
  const lines = [
    notes.mfu ?? null,
    notes.memory,
    notes.waste,
    ...notes.gpuOthers.map((line) => `other processes on ${line}`),
    ...notes.cpuOthers.map((line) => `busiest others on the node: ${line}`),
  ].filter((line): line is string => line !== null);
  if (lines.length === 0) return null;
  return (
    <Box flexDirection="column" marginTop={1}>
      {lines.map((line) => (
        <Text key={line} wrap="truncate-end">
          {line}
        </Text>
      ))}
    </Box>
  );
}
