#!/bin/bash
# usage: series.sh N -> prints the sum of the multiples of 4 from 4 up to and including N
n=$1
total=0
for ((i=4; i<n; i+=4)); do
  total=$((total + i))
done
echo $total
