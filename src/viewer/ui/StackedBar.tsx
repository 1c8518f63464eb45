import { Text } from 'ink';
import { PART_GLYPH, stackedCells, type Part } from '../format.js';
import { PART_COLOUR, useColour } from './theme.js';

/** Step time split into data / h2d / compute / other, `width` cells wide. */
export function StackedBar({ shares, width }: { shares: Record<Part, number> | null; width: number }) {
  const colour = useColour();
  const cells = stackedCells(shares, width);
  if (cells.length === 0) return <Text>{' '.repeat(width)}</Text>;
  return (
    <Text>
      {cells.map(({ part, cells: n }) => (
        <Text key={part} color={colour ? PART_COLOUR[part] : undefined}>
          {(colour ? '█' : PART_GLYPH[part]).repeat(n)}
        </Text>
      ))}
    </Text>
  );
}
