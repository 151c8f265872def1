"""The log engine: topics split into partitions, gapless offsets, consumer groups with cursors."""
