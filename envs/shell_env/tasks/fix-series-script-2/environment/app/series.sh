#!/bin/bash
# usage: series.sh N -> prints the sum of the multiples of 2 from 2 up to and including N
n=$1
total=0
for ((i=2; i<n; i+=2)); do
  total=$((total + i))
done
echo $total
