#!/bin/sh
echo app-ran "$@"
