#!/bin/bash
# usage: series.sh N -> prints the sum of the multiples of 3 from 3 up to and including N
n=$1
total=0
for ((i=3; i<n; i+=3)); do
  total=$((total + i))
done
echo $total
